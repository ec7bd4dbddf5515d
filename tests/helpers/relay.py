#!/usr/bin/python3
"""A stand-in for ssh that injects network faults: use it as MQ_RSH.

    relay.py [--faults-dir DIR] HOST COMMAND_STRING

Runs `sh -c COMMAND_STRING` here, as ssh's remote shell would on HOST, and
relays our stdin to its stdin and its stdout to our stdout (its stderr is
ours). Both streams are parsed as the replication protocol's frames
(big-endian):

    length:u32 type:u8 correlation:u32 payload[length] crc:u32

(header 9 bytes, trailer 4, length at most 64 MiB), so faults act on whole
frames. A stream whose first 4 bytes give a length above 64 MiB (text, say)
is copied byte for byte; so is the rest of a stream once a later length is
above 64 MiB (the stream lost its framing). The relay checks no CRC.

Faults come from the file DIR/HOST, re-read before every frame (a test
changes them while the relay runs; no file or no --faults-dir: no faults).
One per line, `#` starts a comment:

    down                 exit 255 at once, as ssh does when the host is
                         unreachable (seen later: like a cut, at once)
    delay MS             wait MS milliseconds before forwarding each frame
    stall                forward nothing in either direction, pipes kept
                         open, until the file's contents change
    cut-after-frames N   after N frames (both directions together, counted
                         from the start), forward the first half of the next
                         frame, close both ends and exit 255
    bitflip P            flip one random bit of a frame with probability P
    reorder P [MS]       with probability P hold a frame back and send it
                         after the next one of its direction (or after MS
                         milliseconds, default 200, if none comes)
    drop P               drop a frame with probability P
    seed N               seed of the random choices (default: random); the
                         seed used is printed on stderr with the host

Exit status: the command's (255 if a signal killed it), or 255 for `down`
and a cut. No deadlock: each direction has its own thread, EOF on our stdin
closes the command's stdin, and the relay exits when the command has exited
and its stdout is drained.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

MAX_FRAME = 64 * 1024 * 1024
HEADER = 9
TRAILER = 4
REORDER_WAIT = 0.2
STALL_POLL = 0.02


def log(msg):
    try:
        os.write(2, ("relay.py: %s\n" % msg).encode())
    except OSError:
        pass


class Faults:
    """The parsed contents of the faults file."""

    def __init__(self, text=b""):
        self.text = text
        self.down = False
        self.stall = False
        self.delay_ms = 0.0
        self.cut_after = None
        self.bitflip = 0.0
        self.reorder = 0.0
        self.reorder_wait = REORDER_WAIT
        self.drop = 0.0
        self.seed = None
        for raw in text.decode("utf-8", "replace").splitlines():
            words = raw.split("#", 1)[0].split()
            if not words:
                continue
            key, args = words[0], words[1:]
            try:
                if key == "down" and not args:
                    self.down = True
                elif key == "stall" and not args:
                    self.stall = True
                elif key == "delay" and len(args) == 1:
                    self.delay_ms = float(args[0])
                elif key == "cut-after-frames" and len(args) == 1:
                    self.cut_after = int(args[0])
                elif key in ("bitflip", "drop") and len(args) == 1:
                    setattr(self, key, float(args[0]))
                elif key == "reorder" and len(args) in (1, 2):
                    self.reorder = float(args[0])
                    if len(args) == 2:
                        self.reorder_wait = float(args[1]) / 1000
                elif key == "seed" and len(args) == 1:
                    self.seed = int(args[0])
                else:
                    raise ValueError
            except ValueError:
                log("ignoring bad fault line %r" % raw)


class Relay:
    def __init__(self, faults_path, host):
        self.faults_path = faults_path
        self.host = host
        self.lock = threading.Lock()  # frames counter, seeds
        self.frames = 0
        self.seed = None
        self.rngs = {}

    def faults(self):
        if self.faults_path is None:
            return Faults()
        try:
            with open(self.faults_path, "rb") as f:
                return Faults(f.read())
        except FileNotFoundError:
            return Faults()

    def rng(self, direction, faults):
        """The random source of one direction, reseeded when `seed` changes."""
        with self.lock:
            want = faults.seed
            if self.seed is None or (want is not None and want != self.seed):
                self.seed = want if want is not None else random.SystemRandom().randrange(2**63)
                log("host %s: seed %d" % (self.host, self.seed))
                self.rngs = {}
            if direction not in self.rngs:
                self.rngs[direction] = random.Random("%d-%s" % (self.seed, direction))
            return self.rngs[direction]

    def wait_out_stall(self, faults):
        """Returns the faults in force once the file no longer says stall."""
        while faults.stall:
            text = faults.text
            while True:
                time.sleep(STALL_POLL)
                faults = self.faults()
                if faults.text != text:
                    break
        return faults

    def cut(self, ends):
        for fd in ends:
            try:
                os.close(fd)
            except OSError:
                pass
        log("host %s: connection cut" % self.host)
        os._exit(255)


class Reader:
    """Exact reads from a pipe, buffered."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()
        self.eof = False

    def fill(self, n):
        while len(self.buf) < n and not self.eof:
            try:
                chunk = os.read(self.fd, max(1 << 16, n - len(self.buf)))
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.buf += chunk
        return len(self.buf) >= n

    def take(self, n):
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def some(self):
        if not self.buf and not self.eof:
            self.fill(1)
        return self.take(len(self.buf))


class Direction(threading.Thread):
    """Copies frames from `src` to `dst`, applying the faults."""

    def __init__(self, relay, name, src, dst, ends):
        super().__init__(daemon=True, name=name)
        self.relay = relay
        self.src = Reader(src)
        self.dst = dst
        self.ends = ends  # every fd a cut closes
        self.write_lock = threading.Lock()
        self.held = None
        self.held_timer = None
        self.broken = False

    def write(self, data):
        with self.write_lock:
            if self.broken or not data:
                return
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self.dst, view)
                    view = view[n:]
            except OSError:
                self.broken = True  # the reader is gone: drop the rest

    def flush_held(self):
        with self.write_lock:
            frame, self.held = self.held, None
            if self.held_timer is not None:
                self.held_timer.cancel()
                self.held_timer = None
        if frame is not None:
            self.write(frame)

    def hold(self, frame, wait):
        with self.write_lock:
            self.held = frame
            self.held_timer = threading.Timer(wait, self.flush_held)
            self.held_timer.daemon = True
            self.held_timer.start()

    def run(self):
        try:
            self.pump()
        finally:
            self.flush_held()
            try:
                os.close(self.dst)
            except OSError:
                pass

    def pump(self):
        # A frame's length is at most 64 MiB = 0x04000000: a first byte above
        # 4 means this is no frame stream, without waiting for 4 bytes.
        if not self.src.fill(1):
            return
        if self.src.buf[0] > 4 or (self.src.fill(4) and self.length() > MAX_FRAME):
            self.passthrough()
            return
        while self.src.fill(4):
            if self.length() > MAX_FRAME:
                log("host %s: %s: frame length %d over 64 MiB: copying bytes"
                    % (self.relay.host, self.name, self.length()))
                self.passthrough()
                return
            total = HEADER + self.length() + TRAILER
            complete = self.src.fill(total)
            frame = self.src.take(total)
            self.forward(frame)
            if not complete:
                return  # our source was cut mid-frame: pass the piece on, end
        self.write(self.src.take(len(self.src.buf)))

    def length(self):
        return int.from_bytes(self.src.buf[:4], "big")

    def passthrough(self):
        while True:
            data = self.src.some()
            if not data:
                return
            faults = self.relay.wait_out_stall(self.relay.faults())
            if faults.down:
                self.relay.cut(self.ends)
            if faults.delay_ms:
                time.sleep(faults.delay_ms / 1000)
            self.write(data)

    def forward(self, frame):
        relay = self.relay
        faults = relay.wait_out_stall(relay.faults())
        if faults.down:
            relay.cut(self.ends)
        if faults.delay_ms:
            time.sleep(faults.delay_ms / 1000)
        with relay.lock:
            index = relay.frames
            relay.frames += 1
        if faults.cut_after is not None and index >= faults.cut_after:
            self.flush_held()
            self.write(frame[: len(frame) // 2])
            relay.cut(self.ends)
        rng = relay.rng(self.name, faults)
        if faults.drop and rng.random() < faults.drop:
            return
        if faults.bitflip and rng.random() < faults.bitflip:
            bit = rng.randrange(len(frame) * 8)
            frame = bytearray(frame)
            frame[bit // 8] ^= 1 << (bit % 8)
            frame = bytes(frame)
        if self.held is not None:
            with self.write_lock:
                if self.held_timer is not None:
                    self.held_timer.cancel()
                    self.held_timer = None
                held, self.held = self.held, None
            self.write(frame)
            if held is not None:
                self.write(held)
            return
        if faults.reorder and rng.random() < faults.reorder:
            self.hold(frame, faults.reorder_wait)
            return
        self.write(frame)


def main(argv):
    faults_dir = None
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--faults-dir":
        faults_dir, args = args[1], args[2:]
    elif args and args[0].startswith("--faults-dir="):
        faults_dir, args = args[0].split("=", 1)[1], args[1:]
    if len(args) != 2:
        sys.stderr.write("usage: relay.py [--faults-dir DIR] HOST COMMAND_STRING\n")
        return 255
    host, command = args
    if host.startswith("-") or "/" in host or host in ("", ".", ".."):
        log("bad host %r" % host)
        return 255
    relay = Relay(os.path.join(faults_dir, host) if faults_dir else None, host)
    faults = relay.faults()
    if faults.down:
        log("ssh: connect to host %s: Connection refused" % host)
        return 255
    relay.rng("start", faults)  # prints the seed
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    child = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    child_in = child.stdin.fileno()
    child_out = child.stdout.fileno()
    ends = [0, 1, child_in, child_out]
    up = Direction(relay, "up", 0, child_in, ends)
    down = Direction(relay, "down", child_out, 1, ends)
    up.start()
    down.start()
    status = child.wait()
    down.join()
    return status if status >= 0 else 255


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv))
