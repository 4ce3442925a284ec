#!/usr/bin/env python3
"""Many pipes, many rounds: aioring's pipe streams against asyncio's and uvloop's pipe transports.

The workload is the one io_uring's pipe support was first measured with: 128
pipes, 256 rounds of reading and writing them.  One round moves one message
through every pipe: one message is written to each of the 128 pipes and read
back out of each, all pipes at once (one task per pipe reads; one task writes
to every pipe in turn).  The next round starts when every pipe has delivered
its message.  Two modes:

* empty      each pipe's reader is already waiting on its empty pipe when the
             message is written (the reads are issued first, as in the
             original test)
* prefilled  all the messages of the round are written first, then the readers
             are let go: every read finds its message already in the pipe

In the first (untimed) warm-up rounds every reader checks with FIONREAD that
its pipe is empty (or holds its message) when it starts its read; the report
says so.

Variants (each on asyncio's default loop and on uvloop, except sync):

* aioring-streams  ``aioring.open_pipe_reader`` / ``open_pipe_writer``:
                   ``await reader.readinto_exactly(buf)`` into one preallocated
                   bytearray per pipe; ``writer.write(msg); await writer.drain()``
* aioring-fd       ``await aioring.readinto(fd, buf)`` and ``await aioring.write(fd, msg)``
                   on the pipes' (blocking) fds, each repeated on a short count
* transports       ``loop.connect_read_pipe`` / ``connect_write_pipe`` with asyncio's
                   StreamReader and StreamWriter on top: ``await reader.readexactly(n)``;
                   ``writer.write(msg); await writer.drain()``.  On uvloop these
                   are uvloop's pipe transports
* floor            the least any event-loop implementation does per message: a
                   reader task that finds no message awaits a bare future,
                   which the writing task resolves right after its blocking
                   ``os.write``; the woken reader takes the message with one
                   blocking ``os.read`` (no transport, no ring, no stream
                   buffer).  Every asyncio-style reader pays at least this
                   much on its loop: one future, one task wake-up, a write and
                   a read.  Its rate bounds what a target can ask of the loop
* notified         the floor, but told by the loop: every read end is non-blocking
                   and watched with ``loop.add_reader``; its callback reads what
                   the pipe holds with ``os.read`` and resolves the waiting
                   reader's future.  No stream, no transport object: what any
                   reader pays at least when the kernel, not the writing task,
                   tells it a message came (one readiness event and one read per
                   message, plus the floor's future and wake-up)
* sync             blocking ``os.write`` to every pipe, then ``os.read`` from every
                   pipe, in one thread without an event loop: the limit.  It
                   cannot wait on an empty pipe, so it always writes first; the
                   same figure is shown in both modes

Every message read is compared with the one written (each pipe gets a
different message every round), inside the timed section, for every variant.

Fairness: asyncio's pipe transport reads 256 KiB at a time, and until glibc
first frees a large block each such read costs an mmap and a munmap (glibc
serves requests above its mmap threshold, 128 KiB at first, with mmap, and
raises the threshold when it frees such a block).  Whichever configuration
happened to free a large block first would then decide how fast every later
one in the process is.  So this script allocates and frees one 1 MiB block
before anything is timed: glibc's threshold adapts once, for every
configuration alike.

Reported per configuration (median of --repeat runs, interleaved round-robin,
the order rotated every repeat): rounds per second, messages per second,
MB/s of message bytes (MB = 10^6 bytes), the wall time of the 256 rounds (as
the original test reports it) and the process CPU time (every thread,
io_uring's kernel workers included).

Where aioring-streams' CPU per message goes (callgrind for the instructions
in user space, ``--rounds 8`` and ``--rounds 24`` subtracted; strace -c for
the system calls; getrusage for user and system time, interleaved, on uvloop):

* system calls per message: one pwritev2 (the writer's send, RWF_NOWAIT) and,
  prefilled, one preadv2 (the read that does not wait); io_uring_enter and
  epoll_wait about one per round.  The transports make one write and one read.
* empty pipes: 25,300 instructions (26,700 before readinto_exactly copied a
  whole buffer once, without a slice), against 29,400 for uvloop's pipe
  transports and 14,600 for the floor.  Yet the CPU time is about the
  transports' (1.03x; it was 1.10x): the rest is the kernel's, whose ring read
  of an empty pipe arms a poll and completes in task work (0.5-1 us more
  system time per message than epoll and read(2)), and 128 receive chunks
  against libuv's one buffer.
* prefilled pipes: 22,300 instructions (26,900 before the read that does not
  wait moved into the core: recv or preadv2 into the thread's scratch buffer,
  appended to the reader's buffer in C, no Python frame), against 24,600 for
  uvloop's transports; CPU time 0.95x the transports' (it was 1.05x).

Tried and not kept: receiving 1 KiB to 16 KiB reads of a pipe straight into
the caller's buffer (the large path, lowering _READ_AHEAD): more Python per
message (a coroutine and a future of the receive), no less CPU.  Not tried
yet: multishot reads into provided buffers (Linux 6.7; 5.15 would keep
today's path), which would keep one poll armed per pipe instead of arming one
per message.

Run from the repository root:  python benchmarks/pipes.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import fcntl
import functools
import gc
import os
import statistics
import sys
import termios
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchlib import (
    KIB, MB, REPO, Meter, error_text, git_state, iou_thread_cpu, log, machine_info, machine_line,
    new_loop, open_fds, parse_list, preset_value, run_in_new_loop, spread_note, uvloop, version, write_json,
)

try:
    import aioring
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(REPO))
    import aioring


ALL_VARIANTS = ("aioring-streams", "aioring-fd", "transports", "floor", "notified", "sync")
ASYNC_VARIANTS = ALL_VARIANTS[:-1]
ALL_LOOPS = ("asyncio", "uvloop")
ALL_MODES = ("empty", "prefilled")
CHECK_ROUNDS = 2  # warm-up rounds in which every reader checks its pipe with FIONREAD
PIPE_CAPACITY = 64 * KIB  # Linux's default pipe buffer: a prefilled round must fit
DEFAULTS: dict[str, Any] = {"pipes": 128, "rounds": 256, "warmup": 8, "repeat": 5}
QUICK: dict[str, Any] = {"pipes": 128, "rounds": 24, "warmup": 3, "repeat": 1}
# Targets for aioring-streams: (reference variant, reference loop ("": the loop measured),
# threshold, the only loop it applies to (None: each)).
TARGETS = (("transports", "uvloop", 1.0, "uvloop"), ("transports", "asyncio", 1.3, "asyncio"),
           ("floor", "", 0.8, None))
REF_ASYNCIO = ("transports", "asyncio")
REF_UVLOOP = ("transports", "uvloop")
LIMIT = ("sync", "-")


def free_large_block() -> None:
    """Allocate and free one 1 MiB block, so that glibc raises its mmap threshold now.

    Until it has freed a block above the threshold (128 KiB at first), glibc
    serves every larger request with mmap and gives it back with munmap: each
    of asyncio's 256 KiB pipe reads would cost two more system calls.  Done
    once at start, it applies to every configuration alike.
    """
    block = bytearray(1 << 20)
    del block


def parse_size(text: str) -> int:
    """'4K', '4096', '64KiB' -> bytes."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    scale = 1
    if t.endswith("k"):
        t, scale = t[:-1], KIB
    try:
        size = int(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4K, 512, 64K)") from None
    if not 16 <= size <= PIPE_CAPACITY:
        raise argparse.ArgumentTypeError(f"messages must be 16 B to 64 KiB (one pipe's buffer), not {size}")
    return size


def size_name(size: int) -> str:
    return f"{size // KIB} KiB" if size % KIB == 0 else f"{size} B"


# ------------------------------------------------------------------ messages
def smallest_prime_above(n: int) -> int:
    p = n + 1
    while any(p % d == 0 for d in range(2, int(p ** 0.5) + 1)):
        p += 1
    return p


class Messages:
    """The message of every (round, pipe): a different one for each round of a pipe.

    P distinct messages (P a prime above the number of rounds, P > pipes),
    message (r, i) = pool[(r * pipes + i) % P]: a pipe sees P rounds go by
    before a message comes back, so a lost, repeated or misrouted message is
    noticed.
    """

    def __init__(self, size: int, pipes: int, rounds: int) -> None:
        self.size = size
        count = smallest_prime_above(max(rounds, pipes))
        body = os.urandom(size)
        stamp = min(8, size)
        self.pool = [j.to_bytes(8, "big")[:stamp] + body[stamp:] for j in range(count)]
        self.rounds = [[self.pool[(r * pipes + i) % count] for i in range(pipes)] for r in range(rounds)]


def fionread(fd: int) -> int:
    """Bytes waiting in a pipe."""
    out = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, out, True)
    return out[0]


# -------------------------------------------------------------------- pipes
class PipeSet(Protocol):
    """What a variant gives the round driver."""

    read_fds: list[int]

    async def read(self, i: int, expected: bytes) -> None:
        """Read one message from pipe i; raise unless it equals `expected`."""

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        """Write msgs[i] to pipe i, for every pipe, in turn."""

    def buffered(self, i: int) -> int:
        """Bytes of pipe i already read into its stream's buffer (for the untimed check)."""


def mismatch(i: int, got: Any, expected: bytes) -> AssertionError:
    return AssertionError(f"pipe {i}: read {len(got)} bytes that differ from the {len(expected)} "
                          f"written (first 8 bytes: {bytes(got[:8]).hex()} vs {expected[:8].hex()})")


def stream_buffered(reader: asyncio.StreamReader) -> int:
    """What asyncio's StreamReader (aioring's is one) holds unread: a private attribute."""
    return len(getattr(reader, "_buffer", b""))


class AioringStreams:
    def __init__(self, readers: list[Any], writers: list[Any], read_fds: list[int], size: int) -> None:
        self.readers, self.writers, self.read_fds = readers, writers, read_fds
        self.bufs = [bytearray(size) for _ in readers]

    def buffered(self, i: int) -> int:
        return stream_buffered(self.readers[i])

    async def read(self, i: int, expected: bytes) -> None:
        buf = self.bufs[i]
        await self.readers[i].readinto_exactly(buf)
        if buf != expected:
            raise mismatch(i, buf, expected)

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        for w, m in zip(self.writers, msgs, strict=True):
            w.write(m)
            await w.drain()


class AioringFd:
    def __init__(self, read_fds: list[int], write_fds: list[int], size: int) -> None:
        self.read_fds, self.write_fds = read_fds, write_fds
        self.bufs = [bytearray(size) for _ in read_fds]
        self.size = size

    def buffered(self, i: int) -> int:
        return 0

    async def read(self, i: int, expected: bytes) -> None:
        buf = self.bufs[i]
        fd = self.read_fds[i]
        got = await aioring.readinto(fd, buf)
        if got < self.size:  # a short read: the rest of the message
            view = memoryview(buf)
            while got < self.size:
                n = await aioring.readinto(fd, view[got:])
                if not n:
                    raise EOFError(f"pipe {i}: end of file after {got} of {self.size} bytes")
                got += n
            view.release()
        if buf != expected:
            raise mismatch(i, buf, expected)

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        write = aioring.write
        for fd, m in zip(self.write_fds, msgs, strict=True):
            n = await write(fd, m)
            while n < len(m):
                n += await write(fd, memoryview(m)[n:])


class Transports:
    def __init__(self, readers: list[asyncio.StreamReader], writers: list[asyncio.StreamWriter],
                 read_fds: list[int]) -> None:
        self.readers, self.writers, self.read_fds = readers, writers, read_fds

    def buffered(self, i: int) -> int:
        return stream_buffered(self.readers[i])

    async def read(self, i: int, expected: bytes) -> None:
        data = await self.readers[i].readexactly(len(expected))
        if data != expected:
            raise mismatch(i, data, expected)

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        for w, m in zip(self.writers, msgs, strict=True):
            w.write(m)
            await w.drain()


def read_whole(fd: int, size: int, i: int) -> bytes:
    """`size` bytes from pipe i with blocking reads."""
    data = os.read(fd, size)
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            raise EOFError(f"pipe {i}: end of file")
        data += more
    return data


class Floor:
    """A future per message that finds its pipe empty, and plain blocking
    system calls: what every event-loop reader costs at least."""

    def __init__(self, read_fds: list[int], write_fds: list[int], size: int) -> None:
        self.read_fds, self.write_fds, self.size = read_fds, write_fds, size
        self.loop = asyncio.get_running_loop()
        self.written = [0] * len(read_fds)  # messages written that no reader waited for yet
        self.waiters: list[asyncio.Future[None] | None] = [None] * len(read_fds)

    def buffered(self, i: int) -> int:
        return 0

    async def read(self, i: int, expected: bytes) -> None:
        if self.written[i]:
            self.written[i] -= 1
        else:
            waiter = self.waiters[i] = self.loop.create_future()
            await waiter
        data = read_whole(self.read_fds[i], self.size, i)
        if data != expected:
            raise mismatch(i, data, expected)

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        write, waiters = os.write, self.waiters
        for i, (fd, m) in enumerate(zip(self.write_fds, msgs, strict=True)):
            k = write(fd, m)
            while k < len(m):
                k += write(fd, m[k:])
            waiter = waiters[i]
            if waiter is None:
                self.written[i] += 1
            else:
                waiters[i] = None
                waiter.set_result(None)


class Notified:
    """The floor, with the loop's readiness callback instead of the writer
    telling the reader: what any reader the kernel wakes costs at least."""

    def __init__(self, read_fds: list[int], write_fds: list[int], size: int) -> None:
        self.read_fds, self.write_fds, self.size = read_fds, write_fds, size
        self.loop = asyncio.get_running_loop()
        self.received = [bytearray() for _ in read_fds]
        self.waiters: list[asyncio.Future[None] | None] = [None] * len(read_fds)
        for i, fd in enumerate(read_fds):
            os.set_blocking(fd, False)
            self.loop.add_reader(fd, self.readable, i)

    def close(self) -> None:
        for fd in self.read_fds:
            self.loop.remove_reader(fd)

    def buffered(self, i: int) -> int:
        return len(self.received[i])

    def readable(self, i: int) -> None:
        got = self.received[i]
        try:
            got += os.read(self.read_fds[i], PIPE_CAPACITY)
        except BlockingIOError:
            return
        waiter = self.waiters[i]
        if waiter is not None and len(got) >= self.size:
            self.waiters[i] = None
            waiter.set_result(None)

    async def read(self, i: int, expected: bytes) -> None:
        got, size = self.received[i], self.size
        if len(got) < size:
            waiter = self.waiters[i] = self.loop.create_future()
            await waiter
        data = bytes(got[:size])
        del got[:size]
        if data != expected:
            raise mismatch(i, data, expected)

    async def write_all(self, msgs: Sequence[bytes]) -> None:
        write = os.write
        for fd, m in zip(self.write_fds, msgs, strict=True):
            k = write(fd, m)
            while k < len(m):
                k += write(fd, m[k:])


class ReadPipeProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, and a future that tells when the transport let the pipe go."""

    def __init__(self, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(reader, loop=loop)
        self.lost: asyncio.Future[None] = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.lost.done():
            self.lost.set_result(None)


class WritePipeProtocol(asyncio.streams.FlowControlMixin):
    """The protocol asyncio's StreamWriter needs under a write pipe (flow control for drain())."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.lost: asyncio.Future[None] = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.lost.done():
            self.lost.set_result(None)


def new_pipes(n: int) -> list[tuple[int, int]]:
    pipes: list[tuple[int, int]] = []
    try:
        for _ in range(n):
            pipes.append(os.pipe())
    except BaseException:
        for r, w in pipes:
            os.close(r)
            os.close(w)
        raise
    return pipes


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


@asynccontextmanager
async def open_aioring_streams(n: int, size: int) -> AsyncIterator[PipeSet]:
    pipes = new_pipes(n)
    owned: set[int] = {fd for p in pipes for fd in p}  # fds no stream owns yet
    readers: list[Any] = []
    writers: list[Any] = []
    try:
        for r, w in pipes:
            readers.append(await aioring.open_pipe_reader(r))
            owned.discard(r)
            writers.append(await aioring.open_pipe_writer(w))
            owned.discard(w)
        yield AioringStreams(readers, writers, [r for r, _ in pipes], size)
        # Clean shutdown: writers close (EOF), readers read to EOF and let their pipes go.
        for writer in writers:
            writer.close()
        for writer in writers:
            await writer.wait_closed()
        for i, reader in enumerate(readers):
            rest = await reader.read()
            if rest:
                raise AssertionError(f"pipe {i}: {len(rest)} unexpected bytes left at the end")
            await reader.wait_closed()
    finally:
        for stream in (*writers, *readers):
            stream.close()
        close_fds(sorted(owned))


@asynccontextmanager
async def open_fd_pipes(kind: Callable[[list[int], list[int], int], PipeSet], n: int,
                        size: int) -> AsyncIterator[PipeSet]:
    """Bare pipes' fds for a variant that reads and writes them itself."""
    pipes = new_pipes(n)
    try:
        variant = kind([r for r, _ in pipes], [w for _, w in pipes], size)
        try:
            yield variant
        finally:
            close = getattr(variant, "close", None)
            if close is not None:
                close()
        for i, (r, _) in enumerate(pipes):
            left = fionread(r) + variant.buffered(i)
            if left:
                raise AssertionError(f"a pipe has {left} unexpected bytes left at the end")
    finally:
        close_fds([fd for p in pipes for fd in p])


@asynccontextmanager
async def open_transports(n: int, size: int) -> AsyncIterator[PipeSet]:
    loop = asyncio.get_running_loop()
    pipes = new_pipes(n)
    files: list[Any] = []
    read_protocols: list[ReadPipeProtocol] = []
    write_protocols: list[WritePipeProtocol] = []
    readers: list[asyncio.StreamReader] = []
    writers: list[asyncio.StreamWriter] = []
    transports: list[asyncio.BaseTransport] = []
    read_transports: list[asyncio.BaseTransport] = []
    try:
        for r, w in pipes:
            rfile, wfile = open(r, "rb", buffering=0), open(w, "wb", buffering=0)
            files += [rfile, wfile]
            reader = asyncio.StreamReader(loop=loop)
            rp = ReadPipeProtocol(reader, loop)
            rt, _ = await loop.connect_read_pipe(lambda rp=rp: rp, rfile)  # type: ignore[misc]
            transports.append(rt)
            read_transports.append(rt)
            wp = WritePipeProtocol(loop)
            wt, _ = await loop.connect_write_pipe(lambda wp=wp: wp, wfile)  # type: ignore[misc]
            transports.append(wt)
            readers.append(reader)
            read_protocols.append(rp)
            write_protocols.append(wp)
            writers.append(asyncio.StreamWriter(wt, wp, None, loop))
        yield Transports(readers, writers, [r for r, _ in pipes])
        for writer in writers:
            writer.close()
        for i, reader in enumerate(readers):
            rest = await reader.read()
            if rest:
                raise AssertionError(f"pipe {i}: {len(rest)} unexpected bytes left at the end")
            # At EOF asyncio's read pipe transport closes itself; uvloop's keeps the
            # pipe open when the protocol's eof_received() returns True, as
            # StreamReaderProtocol's does, until it is closed.
            read_transports[i].close()
        for lost in [p.lost for p in write_protocols] + [p.lost for p in read_protocols]:
            await lost  # the transports closed their pipes
    finally:
        for t in transports:
            t.close()
        for f in files:
            f.close()


OPENERS: dict[str, Callable[[int, int], Any]] = {
    "aioring-streams": open_aioring_streams, "aioring-fd": functools.partial(open_fd_pipes, AioringFd),
    "transports": open_transports, "floor": functools.partial(open_fd_pipes, Floor),
    "notified": functools.partial(open_fd_pipes, Notified),
}


# ---------------------------------------------------------------- measuring
@dataclass
class Sample:
    variant: str
    loop: str
    mode: str
    repeat: int
    pipes: int
    rounds: int
    size: int
    messages: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    iou_cpu_s: float = 0.0  # part of cpu_s spent in io_uring kernel threads (iou-*)
    other_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile
    steal_s: float = 0.0
    rounds_per_s: float = 0.0
    msgs_per_s: float = 0.0
    mb_per_s: float = 0.0
    cpu_us_per_msg: float = 0.0
    checked_reads: int = 0  # reads whose pipe was checked with FIONREAD (warm-up rounds)
    checked_as_mode: int = 0  # of those, the ones that found the pipe as the mode says
    ring: dict[str, int] = field(default_factory=dict)
    error: str | None = None


_COUNTERS = ("submit_calls", "wakeups", "completions", "backpressured")


async def drive(sample: Sample, msgs: Messages, warmup: int) -> None:
    """Run warm-up + timed rounds of `sample.mode` over `sample.pipes` pipes of `sample.variant`."""
    loop = asyncio.get_running_loop()
    logged: list[str] = []

    def handler(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        logged.append(context.get("message", "") + (f": {error_text(exc)}" if exc else ""))
    loop.set_exception_handler(handler)

    n, size = sample.pipes, sample.size
    total = warmup + sample.rounds
    prefilled = sample.mode == "prefilled"
    go = [loop.create_future() for _ in range(total)] if prefilled else []
    done = [loop.create_future() for _ in range(total)]
    left = [n] * total
    checks = [0, 0]
    meter = Meter(detail=True)

    async with OPENERS[sample.variant](n, size) as pipes:
        read = pipes.read
        read_fds = pipes.read_fds

        async def reader(i: int) -> None:
            r = 0
            try:
                for r in range(total):
                    if prefilled:
                        await go[r]
                    if r < CHECK_ROUNDS:  # untimed: is the pipe as the mode says?
                        waiting = fionread(read_fds[i]) + pipes.buffered(i)
                        checks[0] += 1
                        checks[1] += waiting >= size if prefilled else waiting == 0
                    await read(i, msgs.rounds[r][i])
                    left[r] -= 1
                    if not left[r]:
                        done[r].set_result(None)
            except Exception as exc:  # the driver sees it at once (cancellation is the driver's own)
                for f in done[r:]:
                    if not f.done():
                        f.set_exception(exc)
                raise

        tasks = [loop.create_task(reader(i)) for i in range(n)]
        try:
            await asyncio.sleep(0)  # every reader starts (and, when empty, issues its read)
            ring0: dict[str, int] = {}
            for r in range(total):
                if r == warmup:
                    if sample.variant.startswith("aioring"):
                        ring0 = aioring.statistics()
                    meter.__enter__()
                await pipes.write_all(msgs.rounds[r])
                if prefilled:
                    go[r].set_result(None)
                await done[r]
            meter.__exit__()
            if ring0:
                ring1 = aioring.statistics()
                sample.ring = {k: ring1[k] - ring0[k] for k in _COUNTERS if k in ring1}
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    meter.fill(sample)
    sample.checked_reads, sample.checked_as_mode = checks
    if logged:
        raise RuntimeError("the loop's exception handler was called: " + "; ".join(logged[:3]))


def run_sync(sample: Sample, msgs: Messages, warmup: int) -> None:
    """Blocking pipes, one thread: write a message to every pipe, then read every pipe."""
    n, size = sample.pipes, sample.size
    pipes = new_pipes(n)
    read_fds = [r for r, _ in pipes]
    write_fds = [w for _, w in pipes]
    meter = Meter(detail=True)
    write = os.write
    try:
        for r in range(warmup + sample.rounds):
            if r == warmup:
                meter.__enter__()
            for fd, m in zip(write_fds, msgs.rounds[r], strict=True):
                k = write(fd, m)
                while k < size:
                    k += write(fd, m[k:])
            for i, (fd, m) in enumerate(zip(read_fds, msgs.rounds[r], strict=True)):
                data = read_whole(fd, size, i)
                if data != m:
                    raise mismatch(i, data, m)
        meter.__exit__()
    finally:
        close_fds(read_fds + write_fds)
    meter.fill(sample)


def one_run(sample: Sample, msgs: Messages, warmup: int, timeout: float) -> None:
    fds0 = open_fds()
    if sample.variant == "sync":
        run_sync(sample, msgs, warmup)
    else:
        run_in_new_loop(sample.loop, lambda: drive(sample, msgs, warmup), timeout)
    gc.collect()
    leaked = open_fds() - fds0
    if leaked:
        raise RuntimeError(f"{leaked} more fds open after the run than before (not closed)")
    sample.messages = sample.rounds * sample.pipes
    sample.rounds_per_s = sample.rounds / sample.wall_s
    sample.msgs_per_s = sample.messages / sample.wall_s
    sample.mb_per_s = sample.messages * sample.size / MB / sample.wall_s
    sample.cpu_us_per_msg = sample.cpu_s / sample.messages * 1e6


# ---------------------------------------------------------------- reporting
Key = tuple[str, str, str]  # variant, loop, mode


def median_rows(samples: list[Sample]) -> dict[Key, dict[str, Any]]:
    groups: dict[Key, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.variant, s.loop, s.mode), []).append(s)
    out: dict[Key, dict[str, Any]] = {}
    for key, group in groups.items():
        ok = [s for s in group if s.error is None]
        row: dict[str, Any] = {"variant": key[0], "loop": key[1], "mode": key[2], "runs": len(ok),
                               "errors": [s.error for s in group if s.error]}
        if ok:
            rates = [s.msgs_per_s for s in ok]
            row.update(
                msgs_per_s=statistics.median(rates), msgs_per_s_min=min(rates), msgs_per_s_max=max(rates),
                rounds_per_s=statistics.median(s.rounds_per_s for s in ok),
                mb_per_s=statistics.median(s.mb_per_s for s in ok),
                wall_ms=statistics.median(s.wall_s for s in ok) * 1e3,
                cpu_s=statistics.median(s.cpu_s for s in ok),
                cpu_us_per_msg=statistics.median(s.cpu_us_per_msg for s in ok),
                iou_cpu_us_per_msg=statistics.median(s.iou_cpu_s / s.messages * 1e6 for s in ok),
                checked_reads=sum(s.checked_reads for s in ok),
                checked_as_mode=sum(s.checked_as_mode for s in ok),
            )
            for name in _COUNTERS:
                per = [s.ring[name] / s.messages for s in ok if name in s.ring]
                if per:
                    row[f"{name}_per_msg"] = statistics.median(per)
        out[key] = row
    return out


def render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:  # the first two columns are names: left-aligned
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def row_of(medians: dict[Key, dict[str, Any]], variant: str, loop: str, mode: str) -> dict[str, Any]:
    return medians.get((variant, loop, "-" if variant == "sync" else mode), {})


def report(medians: dict[Key, dict[str, Any]], configs: list[tuple[str, str]], modes: list[str],
           pipes: int, rounds: int, size: int, repeat: int) -> str:
    out: list[str] = []
    what = {"empty": "the readers wait on empty pipes, then the messages are written",
            "prefilled": "the messages are written first, then read from full pipes"}
    for mode in modes:
        out.append(f"\n{mode} pipes ({what[mode]}): {pipes} pipes x {rounds} rounds, "
                   f"{size_name(size)} messages, median of {repeat}")
        rows = []
        for variant, loop in configs:
            r = row_of(medians, variant, loop, mode)
            if not r.get("runs"):
                rows.append([variant, loop, "FAILED"] + [""] * 9)
                continue
            msgs = r["msgs_per_s"]
            rows.append([variant, loop, f"{r['rounds_per_s']:,.0f}", f"{msgs:,.0f}", f"{r['mb_per_s']:,.1f}",
                         f"{r['wall_ms']:,.1f}", f"{r['cpu_s']:.3f}", f"{r['cpu_us_per_msg']:.1f}",
                         ratio(msgs, row_of(medians, *REF_ASYNCIO, mode).get("msgs_per_s")),
                         ratio(msgs, row_of(medians, *REF_UVLOOP, mode).get("msgs_per_s")),
                         ratio(msgs, row_of(medians, "floor", loop, mode).get("msgs_per_s")),
                         ratio(msgs, row_of(medians, *LIMIT, mode).get("msgs_per_s"))])
        out.append(render(["variant", "loop", "rounds/s", "msgs/s", "MB/s", f"ms/{rounds} rounds",
                           "CPU s", "CPU us/msg", "/ asyncio transports", "/ uvloop transports",
                           "/ floor", "/ sync"], rows))
    if any(v == "sync" for v, _ in configs):
        out.append("(sync writes every pipe, then reads every pipe, in one thread; it cannot wait on "
                   "an empty pipe, so both tables show the same sync figure)")
    return "\n".join(out)


def targets(medians: dict[Key, dict[str, Any]], loops: list[str], modes: list[str]) -> str:
    lines = ["Targets, aioring-streams msgs/s over the pipe transports and the floor:"]
    for mode in modes:
        for rv, rl, threshold, only in TARGETS:
            for loop in loops:
                if only is not None and loop != only:
                    continue
                ref = row_of(medians, rv, rl or loop, mode).get("msgs_per_s")
                name = (f"{rl}'s pipe transports" if rv == "transports" else f"the floor on {loop}'s loop")
                mine = row_of(medians, "aioring-streams", loop, mode).get("msgs_per_s")
                what = f"{mode}: aioring-streams/{loop} >= {threshold}x {name}"
                if mine is None or ref is None:
                    lines.append(f"  n/a   {what} (not measured)")
                    continue
                verdict = "PASS" if mine >= threshold * ref else "FAIL"
                lines.append(f"  {verdict}  {what}: {mine / ref:.2f}x ({mine:,.0f} vs {ref:,.0f} msgs/s)")
    bounds = []
    for mode in modes:
        for loop in loops:
            floor = row_of(medians, "floor", loop, mode).get("msgs_per_s")
            refs = [(rl, row_of(medians, rv, rl, mode).get("msgs_per_s"))
                    for rv, rl in (REF_ASYNCIO, REF_UVLOOP)]
            if floor:
                told = row_of(medians, "notified", loop, mode).get("msgs_per_s")
                bounds.append(f"  {mode}, {loop}'s loop: {floor:,.0f} msgs/s = " + ", ".join(
                    f"{floor / ref:.2f}x {rl}'s pipe transports" for rl, ref in refs if ref)
                    + (f"; told by the loop (notified): {told:,.0f} msgs/s = {told / floor:.2f}x the floor"
                       if told else ""))
    if bounds:
        lines.append("The floor (a future, a task wake-up, one write and one read per message, nothing else) "
                     "on each loop; no reader on that loop can pass it:")
        lines += bounds
    return "\n".join(lines)


def notes(medians: dict[Key, dict[str, Any]], samples: list[Sample]) -> str:
    out: list[str] = []
    checked = [(k, r) for k, r in medians.items() if r.get("checked_reads")]
    off = [f"{k[0]}/{k[1]}/{k[2]}: {r['checked_as_mode']} of {r['checked_reads']}"
           for k, r in checked if r["checked_as_mode"] != r["checked_reads"]]
    if checked:
        out.append(f"Check of every read in the first {CHECK_ROUNDS} warm-up rounds (FIONREAD, plus what "
                   "its stream had buffered already): "
                   + ("every read found its pipe as its mode says (empty, or holding the message)."
                      if not off else "NOT every read found its pipe as its mode says: " + ", ".join(off)))
    iou = {k: r["iou_cpu_us_per_msg"] for k, r in medians.items() if r.get("iou_cpu_us_per_msg", 0) > 0.05}
    out.append("CPU is the process's CPU time over the timed rounds (all threads, io_uring's kernel "
               "workers included). "
               + ("Of it, us/msg in io_uring kernel threads: "
                  + ", ".join(f"{v}/{lp}/{m} {us:.1f}" for (v, lp, m), us in sorted(iou.items()))
                  if iou else "No measurable CPU in io_uring kernel threads (iou-*): "
                  "nothing was punted to io-wq."))
    ring = [f"{v}/{lp}/{m}: {r['submit_calls_per_msg']:.3f} submits, {r.get('wakeups_per_msg', 0):.3f} "
            "wakeups" for (v, lp, m), r in sorted(medians.items()) if "submit_calls_per_msg" in r]
    if ring:
        out.append("aioring.statistics() per message (median): " + "; ".join(ring))
    if samples:
        wall = sum(s.wall_s for s in samples)
        other = sum(s.other_cpu_s for s in samples) / wall
        steal = sum(s.steal_s for s in samples) / wall
        line = (f"Meanwhile the rest of the machine used {other:.2f} CPUs on average during timed runs, "
                f"and the hypervisor stole {steal:.2f} CPUs.")
        if other > 0.1 or steal > 0.05:
            line += " Results are noisier than on an idle machine."
        out.append(line)
    spread = spread_note(medians.items(), "msgs_per_s", lambda k: f"{k[0]}, {k[1]}, {k[2]}")
    if spread:
        out.append(f"Largest {spread}.")
    return "\n".join(out)


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="128 pipes, 256 rounds of write and read (on empty and on prefilled pipes): "
                    "aioring's pipe streams and fd functions vs asyncio's and uvloop's pipe "
                    "transports and a blocking os.write/os.read loop.")
    parser.add_argument("--pipes", type=int, default=None,
                        help=f"pipes (default {DEFAULTS['pipes']})")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"timed rounds per run (default {DEFAULTS['rounds']}, "
                             f"--quick {QUICK['rounds']})")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"untimed rounds before them (default {DEFAULTS['warmup']}, "
                             f"--quick {QUICK['warmup']}); the first {CHECK_ROUNDS} check the pipes")
    parser.add_argument("--size", type=parse_size, default=4 * KIB,
                        help="message size, 16 B to 64 KiB (default 4K)")
    parser.add_argument("--modes", type=parse_list(ALL_MODES, canonical=True), default=list(ALL_MODES),
                        help="comma-separated: empty,prefilled (default both)")
    parser.add_argument("--variants", type=parse_list(ALL_VARIANTS, canonical=True),
                        default=list(ALL_VARIANTS),
                        help="comma-separated variants (default " + ",".join(ALL_VARIANTS) + ")")
    parser.add_argument("--loops", type=parse_list(ALL_LOOPS, canonical=True), default=list(ALL_LOOPS),
                        help="comma-separated event loops (default asyncio,uvloop)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per configuration, interleaved; the median is reported "
                             f"(default {DEFAULTS['repeat']}, --quick {QUICK['repeat']})")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds before one run is abandoned as hung (default 60)")
    parser.add_argument("--quick", action="store_true", help="few rounds, one run each: a smoke test")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write raw and median results here")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    npipes, rounds, warmup, repeat = (preset_value(args, preset, k) for k in ("pipes", "rounds", "warmup",
                                                                              "repeat"))
    if npipes < 1 or rounds < 1 or repeat < 1 or warmup < CHECK_ROUNDS:
        parser.error(f"--pipes, --rounds and --repeat must be positive, --warmup at least {CHECK_ROUNDS}")
    size = args.size
    started = time.perf_counter()

    skipped: list[str] = []
    loops = list(args.loops)
    if "uvloop" in loops and uvloop is None:
        loops.remove("uvloop")
        skipped.append("uvloop: not installed; its runs (uvloop's pipe transports, aioring on uvloop) "
                       "are skipped and the uvloop targets are n/a (pip install uvloop)")
    variants = list(args.variants)
    if not loops:
        variants = [v for v in variants if v == "sync"]
    if not variants:
        sys.exit("error: nothing left to run")
    for note in skipped:
        log("note: " + note)
    try:
        backend = aioring.backend()
    except OSError as exc:
        sys.exit(f"error: io_uring is not available here: {exc}")

    free_large_block()
    if "uvloop" in loops:
        new_loop("uvloop").close()  # libuv's process-wide pipe is made now, not inside a run
    msgs = Messages(size, npipes, warmup + rounds)
    configs = [(v, lp) for v in variants if v != "sync" for lp in loops] + \
        ([("sync", "-")] if "sync" in variants else [])
    plan = [(v, lp, m) for v, lp in configs if v != "sync" for m in args.modes] + \
        ([("sync", "-", "-")] if "sync" in variants else [])
    total = len(plan) * repeat
    log(f"{npipes} pipes, {warmup} + {rounds} rounds of {size_name(size)} messages, "
        f"{len(plan)} configurations x {repeat} runs")
    fds_before = open_fds()
    samples: list[Sample] = []
    n = 0
    for rep in range(repeat):
        shift = rep % len(plan)  # rotate the order, so no configuration always runs first or last
        for variant, loop_name, mode in plan[shift:] + plan[:shift]:
            n += 1
            log(f"[{n}/{total}] {variant:<15} loop={loop_name:<7} {mode:<9} repeat {rep + 1}/{repeat} ... ",
                end="")
            s = Sample(variant, loop_name, mode, rep + 1, npipes, rounds, size)
            try:
                one_run(s, msgs, warmup, args.timeout)
            except Exception as exc:
                s.error = error_text(exc)
                log(f"FAILED: {s.error}")
            else:
                log(f"{s.msgs_per_s:>9,.0f} msgs/s {s.cpu_us_per_msg:6.1f} us/msg CPU "
                    f"({s.wall_s * 1e3:.0f} ms)")
            samples.append(s)

    medians = median_rows(samples)
    gc.collect()
    leftovers = {"fds": open_fds() - fds_before, "io_uring_threads": len(iou_thread_cpu())}
    elapsed = time.perf_counter() - started
    meta: dict[str, Any] = {
        **machine_info(), "aioring_backend": backend, "git": git_state(),
        "versions": {d: version(d) for d in ("aioring", "uvloop")},
        "pipes": npipes, "rounds": rounds, "warmup_rounds": warmup, "size": size,
        "modes": args.modes, "variants": variants, "loops": loops, "repeat": repeat,
        "skipped": skipped, "leftovers_after_all_runs": leftovers, "runtime_s": elapsed,
    }
    v = meta["versions"]
    print(f"{machine_line(meta)} | aioring.backend() = {backend} | {meta['git']}")
    print(f"aioring {v['aioring']}, uvloop {v['uvloop']}; one 1 MiB block was freed before timing "
          "(glibc's mmap threshold adapted once for every configuration)")
    for note in skipped:
        print("skipped: " + note)
    print(report(medians, configs, args.modes, npipes, rounds, size, repeat))
    print()
    print(targets(medians, loops, args.modes))
    print()
    print(notes(medians, [s for s in samples if s.error is None]))
    if leftovers["fds"] or leftovers["io_uring_threads"]:
        print(f"NOTE: after all runs {leftovers['fds']} more fds are open than before, and "
              f"{leftovers['io_uring_threads']} io_uring kernel threads remain.")
    failed = [s for s in samples if s.error]
    if failed:
        print(f"FAILED runs: {len(failed)} of {len(samples)}")
        for s in failed:
            print(f"  {s.variant} {s.loop} {s.mode} repeat {s.repeat}: {s.error}")
    print(f"total runtime {elapsed:.1f} s")
    write_json(args.json, {"meta": meta, "samples": [asdict(s) for s in samples],
                           "medians": list(medians.values())})
    return 1 if failed or leftovers["fds"] else 0


if __name__ == "__main__":
    sys.exit(main())
