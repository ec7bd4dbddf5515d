"""Checks of tests/helpers/relay.py, one fault at a time (run by
tests/cli/relay_selftest.sh).

    relay_check.py serve          a frame echo server on stdin/stdout
    relay_check.py CHECK RELAY    runs one check against the relay script

The echo server answers each frame with type | 0x80, the same correlation
and payload; a frame with a bad CRC gets type 0xEE and payload "bad crc";
type 0x7F makes it exit with status payload[0].

No check asserts that something is fast: waits are bounded only to stop a
hang (HANG seconds), and the one lower bound (delay) is what the fault
promises.
"""

import os
import random
import select
import subprocess
import sys
import tempfile
import threading
import time

import frames

HANG = 60
ECHO_REPLY = 0x80
BAD_CRC = 0xEE
EXIT = 0x7F


def serve():
    reader = frames.FrameReader(0)
    while True:
        frame = reader.read()
        if frame is None:
            return 0
        if not frame.crc_ok:
            out = frames.encode(BAD_CRC, frame.correlation, b"bad crc")
        elif frame.type == EXIT:
            return frame.payload[0]
        else:
            out = frames.encode(frame.type | ECHO_REPLY, frame.correlation, frame.payload)
        frames.write_all(1, out)


class Fail(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Fail(what)


class Session:
    """One relay process: HOST "h", faults in a temp dir, a command string."""

    def __init__(self, relay, work, command, faults=None, host="h"):
        self.faults_dir = os.path.join(work, "faults")
        os.makedirs(self.faults_dir, exist_ok=True)
        self.host = host
        self.set_faults(faults)
        self.stderr_path = os.path.join(work, "relay.err")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [relay, "--faults-dir", self.faults_dir, host, command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0,
            cwd=work)
        self.reader = frames.FrameReader(self.proc.stdout.fileno())

    def set_faults(self, text):
        path = os.path.join(self.faults_dir, self.host)
        if text is None:
            if os.path.exists(path):
                os.unlink(path)
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path)

    def send(self, data):
        frames.write_all(self.proc.stdin.fileno(), data)

    def close_stdin(self):
        self.proc.stdin.close()

    def readable(self, seconds):
        r, _, _ = select.select([self.proc.stdout], [], [], seconds)
        return bool(r)

    def read_frame(self):
        expect(self.readable(HANG), "no frame within %d s (hang)" % HANG)
        return self.reader.read()

    def read_all(self):
        out = b""
        while True:
            expect(self.readable(HANG), "no EOF within %d s (hang)" % HANG)
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            if not chunk:
                return out
            out += chunk

    def wait(self):
        try:
            return self.proc.wait(HANG)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Fail("relay did not exit within %d s (hang)" % HANG)

    def err(self):
        self.stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def echo_command():
    here = os.path.dirname(os.path.abspath(__file__))
    return "exec %s %s serve" % (sys.executable, os.path.join(here, "relay_check.py"))


def request(i, size=None):
    payload = bytes((i * 7 + k) & 0xFF for k in range(size if size is not None else i % 50))
    return frames.encode(1 + i % 0x7E, i, payload)


def check_crc(_relay, _work):
    expect(frames.crc32c(b"123456789") == 0xE3069283, "crc32c check value")
    expect(frames.crc32c(b"") == 0, "crc32c of nothing")


def check_clean(relay, work):
    """No faults: every frame through the echo server and back, in order."""
    s = Session(relay, work, echo_command())
    sizes = [0, 1, 9, 13, 4096, 65536, 1 << 20] + list(range(40))
    for i, size in enumerate(sizes):
        s.send(request(i, size))
    for i, size in enumerate(sizes):
        f = s.read_frame()
        expect(f is not None and f.crc_ok, "reply %d: %r" % (i, f))
        expect(f.type == (1 + i % 0x7E) | ECHO_REPLY and f.correlation == i, "reply %d: %r" % (i, f))
        expect(f.payload == request(i, size)[frames.HEADER:-frames.TRAILER], "payload %d" % i)
    s.close_stdin()
    expect(s.read_frame() is None and s.reader.partial == b"", "EOF after the replies")
    expect(s.wait() == 0, "exit status after EOF")


def check_exit_status(relay, work):
    """The relay exits with the command's status, without our stdin closing."""
    s = Session(relay, work, echo_command())
    s.send(frames.encode(EXIT, 1, bytes([7])))
    expect(s.wait() == 7, "exit status 7 relayed")
    s = Session(relay, work, "kill -9 $$")
    expect(s.wait() == 255, "a command killed by a signal: 255")


def check_passthrough(relay, work):
    """Streams that are no frames are copied byte for byte; stderr passes."""
    s = Session(relay, work, "echo out; echo err >&2")
    s.close_stdin()
    expect(s.read_all() == b"out\n", "stdout of echo")
    expect(s.wait() == 0, "exit status")
    expect("err\n" in s.err(), "stderr passed through: %r" % s.err())
    data = b"hello world\n" + bytes(range(256)) * 1000
    s = Session(relay, work, "cat")
    s.send(data)
    s.close_stdin()
    expect(s.read_all() == data, "cat of text and bytes")
    expect(s.wait() == 0, "exit status of cat")
    # 4 bytes giving a length over 64 MiB: bytes, though the first byte is small.
    data = b"\x04\x00\x00\x01" + b"x" * 100
    s = Session(relay, work, "cat")
    s.send(data)
    s.close_stdin()
    expect(s.read_all() == data, "stream with a length over 64 MiB")
    s.wait()
    # Output shorter than a frame header is not held back waiting for more.
    s = Session(relay, work, "printf ok; cat >/dev/null")
    expect(s.readable(HANG) and os.read(s.proc.stdout.fileno(), 10) == b"ok", "ok, at once")
    s.close_stdin()
    expect(s.wait() == 0, "exit status")
    # The command string is parsed by sh, as the remote shell would.
    s = Session(relay, work, "printf '%s\\n' 'a b;touch x' \"\\$HOME\"")
    s.close_stdin()
    expect(s.read_all() == b"a b;touch x\n$HOME\n", "quoted words")
    expect(not os.path.exists(os.path.join(work, "x")), "no x created")
    s.wait()


def check_partial(relay, work):
    """Half a frame then EOF: the half reaches the command, then its EOF."""
    out = os.path.join(work, "got")
    s = Session(relay, work, "cat > got")
    data = request(1, 100) + request(2, 100)[:50]
    s.send(data)
    s.close_stdin()
    expect(s.wait() == 0, "exit status")
    with open(out, "rb") as f:
        expect(f.read() == data, "frame and a half forwarded")


def check_down(relay, work):
    s = Session(relay, work, "touch ran", faults="down\n")
    expect(s.wait() == 255, "down: exit 255")
    expect(not os.path.exists(os.path.join(work, "ran")), "down: the command never ran")
    expect("Connection refused" in s.err(), "down: ssh's message: %r" % s.err())


def check_down_later(relay, work):
    """down written while connected: the connection ends like a cut."""
    s = Session(relay, work, echo_command())
    s.send(request(1))
    expect(s.read_frame().correlation == 1, "first reply")
    s.set_faults("down\n")
    s.send(request(2))
    expect(s.read_all() == b"", "nothing after down")
    expect(s.wait() == 255, "exit 255")


def check_delay(relay, work):
    s = Session(relay, work, echo_command())
    s.send(request(1))
    expect(s.read_frame().correlation == 1, "reply before the delay")  # the server is up
    s.set_faults("delay 300\n")
    start = time.monotonic()
    s.send(request(2))
    f = s.read_frame()
    elapsed = time.monotonic() - start
    expect(f is not None and f.correlation == 2 and f.crc_ok, "delayed reply %r" % f)
    # Both the request and the reply wait 300 ms: a lower bound, not a timing.
    expect(elapsed >= 0.6, "round trip took %.3f s, under the 2 x 300 ms delay" % elapsed)
    s.close_stdin()
    expect(s.wait() == 0, "exit status")


def check_stall(relay, work):
    s = Session(relay, work, echo_command())
    s.send(request(1))
    expect(s.read_frame().correlation == 1, "reply before the stall")
    s.set_faults("stall\n")
    s.send(request(2))
    # Stalled: nothing comes back and the relay keeps running. (No reply in
    # 1 s proves nothing by itself; a reply would prove the stall broken.)
    expect(not s.readable(1.0), "a reply came through a stall")
    expect(s.proc.poll() is None, "the relay exited during a stall")
    s.set_faults("stall # still\n")  # changed, still stalled
    expect(not s.readable(0.5), "a reply came through a stall (file rewritten)")
    s.set_faults("")
    f = s.read_frame()
    expect(f is not None and f.correlation == 2 and f.crc_ok, "reply after the stall: %r" % f)
    s.close_stdin()
    expect(s.wait() == 0, "exit status")


def check_cut(relay, work):
    """cut-after-frames 3: request 1, reply 1, request 2 pass; half of reply 2."""
    s = Session(relay, work, echo_command(), faults="cut-after-frames 3\n")
    replies = []
    for i in (1, 2):
        s.send(request(i, 40))
        f = s.read_frame()
        if f is None:
            break
        replies.append(f)
    expect(len(replies) == 1 and replies[0].correlation == 1, "one whole reply: %r" % replies)
    want = frames.encode(1 + 2 | ECHO_REPLY, 2, request(2, 40)[frames.HEADER:-frames.TRAILER])
    expect(s.reader.partial == want[: len(want) // 2],
           "half of reply 2: got %d bytes, want %d" % (len(s.reader.partial), len(want) // 2))
    expect(s.wait() == 255, "a cut exits 255")
    expect("cut" in s.err(), "the cut is reported: %r" % s.err())


def run_sink(relay, work, fault_text, sent, name):
    """Sends `sent` through the relay into `cat > FILE`; returns FILE's bytes."""
    sub = os.path.join(work, name)
    os.makedirs(sub)
    s = Session(relay, sub, "cat > got", faults=fault_text)
    s.send(b"".join(sent))
    s.close_stdin()
    expect(s.wait() == 0, "%s: exit status" % name)
    with open(os.path.join(sub, "got"), "rb") as f:
        return f.read(), s.err()


def check_bitflip(relay, work):
    sent = [request(i, 30) for i in range(200)]
    got, err = run_sink(relay, work, "bitflip 1\nseed 42\n", sent, "all")
    expect("seed 42" in err and "h" in err, "seed printed with the host: %r" % err)
    expect(len(got) == len(b"".join(sent)), "bitflip keeps the length")
    pos = 0
    for i, frame in enumerate(sent):
        diff = bin(int.from_bytes(bytes(a ^ b for a, b in zip(frame, got[pos:pos + len(frame)])),
                                  "big")).count("1")
        expect(diff == 1, "frame %d: %d bits flipped, want 1" % (i, diff))
        pos += len(frame)
    half, _ = run_sink(relay, work, "bitflip 0.5\nseed 7\n", sent, "half")
    again, _ = run_sink(relay, work, "bitflip 0.5\nseed 7\n", sent, "again")
    expect(half == again, "the same seed flips the same bits")
    flipped = sum(1 for i, f in enumerate(sent) if half[i * len(f):(i + 1) * len(f)] != f)
    expect(0 < flipped < len(sent), "bitflip 0.5 flipped %d of %d" % (flipped, len(sent)))


def check_drop(relay, work):
    sent = [request(i, 30) for i in range(200)]
    got, _ = run_sink(relay, work, "drop 0.5\nseed 3\n", sent, "drop")
    again, _ = run_sink(relay, work, "drop 0.5\nseed 3\n", sent, "again")
    expect(got == again, "the same seed drops the same frames")
    kept, rest = frames.split(got)
    expect(rest == b"", "whole frames only")
    ids = [f.correlation for f in kept]
    expect(all(f.crc_ok for f in kept), "dropping changes no frame")
    expect(ids == sorted(ids) and len(set(ids)) == len(ids), "kept frames in order, once")
    expect(0 < len(ids) < len(sent), "drop 0.5 kept %d of %d" % (len(ids), len(sent)))
    got, _ = run_sink(relay, work, "drop 1\n", sent, "all")
    expect(got == b"", "drop 1 drops everything")


def check_reorder(relay, work):
    # A long wait: each held frame goes out after its successor.
    sent = [request(i, 30) for i in range(6)]
    got, _ = run_sink(relay, work, "reorder 1 60000\n", sent, "pairs")
    ids = [f.correlation for f in frames.split(got)[0]]
    expect(ids == [1, 0, 3, 2, 5, 4], "reorder 1: order %r" % ids)
    # A held frame with no successor goes out after the wait (and after EOF).
    s = Session(relay, work, "cat", faults="reorder 1 300\n")
    start = time.monotonic()
    s.send(request(9))
    f = s.read_frame()
    expect(f is not None and f.correlation == 9, "held frame delivered: %r" % f)
    expect(time.monotonic() - start >= 0.3, "held frame came before the wait")
    s.close_stdin()
    expect(s.wait() == 0, "exit status")
    # Same seed, same order; every frame once.
    sent = [request(i, 30) for i in range(100)]
    a, _ = run_sink(relay, work, "reorder 0.3 60000\nseed 11\n", sent, "a")
    b, _ = run_sink(relay, work, "reorder 0.3 60000\nseed 11\n", sent, "b")
    ids = [f.correlation for f in frames.split(a)[0]]
    expect(a == b, "the same seed reorders the same frames")
    expect(sorted(ids) == list(range(100)) and ids != list(range(100)), "a permutation: %r" % ids)


def check_big(relay, work):
    """A 16 MiB frame each way through cat (the relay holds a frame whole)."""
    payload = random.Random(5).randbytes(16 << 20)
    head = frames.encode(3, 77, b"")[:frames.HEADER]
    head = (len(payload)).to_bytes(4, "big") + head[4:]
    frame = head + payload + b"\0\0\0\0"  # the relay checks no CRC
    s = Session(relay, work, "cat")
    s.send(frame)
    s.close_stdin()
    expect(s.read_all() == frame, "16 MiB frame round trip")
    expect(s.wait() == 0, "exit status")


def check_no_deadlock(relay, work):
    """The command writes a lot before reading: both directions move at once."""
    s = Session(relay, work, "head -c 8000000 /dev/zero; cat >/dev/null")
    data = b"".join(request(i, 65536) for i in range(128))

    def send():
        s.send(data)
        s.close_stdin()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    expect(len(s.read_all()) == 8000000, "8 MB out while 8 MB went in")
    sender.join(HANG)
    expect(not sender.is_alive(), "our frames were not all taken (hang)")
    expect(s.wait() == 0, "exit status")


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}


def main(argv):
    if argv[1:] == ["serve"]:
        return serve()
    if len(argv) != 3 or argv[1] not in CHECKS:
        sys.stderr.write("usage: relay_check.py serve | relay_check.py CHECK RELAY\n"
                         "checks: %s\n" % " ".join(CHECKS))
        return 64
    with tempfile.TemporaryDirectory() as work:
        try:
            CHECKS[argv[1]](argv[2], work)
        except Fail as e:
            sys.stderr.write("FAIL: relay %s: %s\n" % (argv[1], e))
            return 1
    print("ok: relay %s" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
