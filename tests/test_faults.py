"""Faults: cancellation storms, tiny rings under load, closing things under
operations in flight, fork, a loop per thread, KeyboardInterrupt and signals.

Every check is stated in what a user sees: the bytes a read returned, the
bytes a buffer holds, what a peer received, the fds the process has, whether
an awaiting task ends.  Randomness is seeded; waiting is on conditions.
Timeouts appear only as hang detectors (a deadlock fails instead of hanging
the suite), never as assertions about speed.

FAULTS counts the faults injected (cancellations that hit a running task,
closes, forks, signals, interrupts) over the session.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import faulthandler
import gc
import os
import random
import signal
import socket
import threading
import traceback
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

import aioring
import aioring.os
from aioring import _loops

FAULTS: collections.Counter[str] = collections.Counter()
STORM_OPERATIONS = [0]  # operations started by the cancellation storms

SENTINEL = 0xA5
KiB = 1024
MiB = 1024 * KiB


@pytest.fixture(scope="module", autouse=True)
def _report_faults(request: pytest.FixtureRequest) -> Any:
    """At the end of the module, one line with the faults injected."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and FAULTS:
        counts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(FAULTS.items()))
        reporter.write_line(f"\ntest_faults: injected {counts}; {STORM_OPERATIONS[0]:,} storm operations")


# ---------------------------------------------------------------- helpers
def _fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _sentinel(n: int) -> bytearray:
    return bytearray([SENTINEL]) * n


def _untouched(buf: Any) -> bool:
    with memoryview(buf) as view:
        return view.cast("B").tobytes().count(SENTINEL) == view.nbytes


async def _until(condition: Callable[[], bool], iterations: int = 10_000) -> None:
    """Let the loop run until condition() holds (bounded: fails instead of hanging)."""
    for _ in range(iterations):
        if condition():
            return
        await asyncio.sleep(0)
    assert condition(), "the condition never held"


def _cancel_after(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any], iterations: int) -> None:
    """Cancel `task` after `iterations` more loop iterations."""
    if task.done():
        return
    if iterations <= 0:
        if task.cancel():
            FAULTS["cancellations"] += 1
        return
    loop.call_soon(_cancel_after, loop, task, iterations - 1)


async def _attempt(rng: random.Random, aw: Awaitable[Any], p_cancel: float,
                   max_iterations: int = 3) -> tuple[Any, bool]:
    """Run `aw` as a task that is cancelled, with probability p_cancel, after
    1 to max_iterations loop iterations (once it has started): (result,
    False) or (None, True) if it ended cancelled.  Any other exception
    propagates."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(aw)
    STORM_OPERATIONS[0] += 1
    if rng.random() < p_cancel:
        _cancel_after(loop, task, rng.randrange(1, max_iterations + 1))
    try:
        return await task, False
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # the caller itself was cancelled
        return None, True


async def _without_stall(aw: Awaitable[Any], progress: Callable[[], int], what: str,
                         patience: float = 2.0) -> Any:
    """Await `aw`; fail if `progress()` stays the same for `patience` seconds
    while it is not done (a hang, not slowness: any progress resets the clock)."""
    fut = asyncio.ensure_future(aw)
    last = progress()
    while True:
        done, _ = await asyncio.wait({fut}, timeout=patience)
        if done:
            return fut.result()
        now = progress()
        if now == last:
            fut.cancel()
            await asyncio.wait({fut}, timeout=patience)
            if fut.done() and not fut.cancelled():
                fut.exception()
            pytest.fail(f"{what}: no progress for {patience} s (progress {now}); stats "
                        f"{aioring.statistics()}")
        last = now


def _cancel_all(tasks: list[asyncio.Future[Any]]) -> None:
    for task in tasks:
        if task.cancel():
            FAULTS["cancellations"] += 1


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.socket()
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def _sizes(rng: random.Random) -> int:
    return rng.choice([1, 2, 3, 10, 100, 500, 1000, 4000, 16_000, 70_000] if rng.random() < 0.1
                      else [1, 2, 3, 10, 100, 500, 1000, 4000])


def _loop_kind() -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of loops of the running loop's kind."""
    if isinstance(asyncio.get_running_loop(), uvloop.Loop):
        return uvloop.new_event_loop
    return asyncio.SelectorEventLoop


@pytest.fixture
def file_content(disk_dir):
    """(path, content): 1 MiB of seeded bytes in a file on the real disk."""
    path = os.path.join(disk_dir, "content.bin")
    content = random.Random(11).randbytes(MiB)
    with open(path, "wb") as f:
        f.write(content)
    return path, content


@pytest.fixture
def closing():
    """keep(fd or socket) -> it; closed at teardown unless closed already."""
    made: list[Any] = []

    def keep(thing: Any) -> Any:
        made.append(thing)
        return thing

    yield keep
    for thing in made:
        if isinstance(thing, int):
            with contextlib.suppress(OSError):
                os.close(thing)
        else:
            thing.close()


# ================================================== cancellation storms
@pytest.mark.parametrize("reads", ["direct first", "ring"])
async def test_cancellation_storm_on_file_reads_and_writes(file_content, disk_dir, closing, request, reads):
    """Thousands of reads (into sentinel-filled buffers, from a file whose pages
    are dropped from the cache now and then, so that some wait for the disk)
    and writes of distinct blocks, on a small ring, each cancelled at a random
    moment.  A read returns the file's bytes and leaves the rest of its buffer
    alone; a read that ends cancelled touched nothing, then or later; a write
    that returned n wrote exactly its first n bytes, one that ended cancelled
    wrote nothing.  Reads are tried directly first (RWF_NOWAIT), or go
    through the ring only."""
    if reads == "ring":
        request.getfixturevalue("ring_reads")
    path, content = file_content
    fd = closing(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    out_path = os.path.join(disk_dir, "blocks.bin")
    block = 4 * KiB
    nblocks = 600
    out = closing(os.open(out_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    os.ftruncate(out, nblocks * block)
    _loops.get_ring(entries=8)
    rng = random.Random(1)
    blocks = list(range(nblocks))
    rng.shuffle(blocks)
    written: dict[int, int] = {}  # block -> bytes the write reported
    cancelled_bufs: list[tuple[bytearray, bytes]] = []
    counts = collections.Counter()

    async def one_read() -> None:
        size = rng.choice([1, 100, 4096, 65536, 300_000])
        off = rng.randrange(0, len(content))
        buf = _sentinel(size)
        n, cancelled = await _attempt(rng, aioring.readinto(fd, buf, off), 0.7)
        if cancelled:
            counts["read cancelled"] += 1
            assert _untouched(buf), "a cancelled read wrote into its buffer"
            cancelled_bufs.append((buf, bytes(buf)))
            return
        counts["read done"] += 1
        assert n == min(size, len(content) - off)
        assert buf[:n] == content[off:off + n]
        assert _untouched(buf[n:])

    async def one_pread() -> None:
        size = rng.choice([10, 5000, 200_000])
        off = rng.randrange(0, len(content))
        data, cancelled = await _attempt(rng, aioring.read(fd, size, off), 0.7)
        if not cancelled:
            assert data == content[off:off + size]

    async def one_write() -> None:
        if not blocks:
            return
        b = blocks.pop()
        payload = bytes([b % 251 + 1]) * block
        n, cancelled = await _attempt(rng, aioring.write(out, payload, b * block), 0.7)
        if cancelled:
            counts["write cancelled"] += 1
        else:
            counts["write done"] += 1
            written[b] = n

    ops = 0
    while ops < 3000:
        if ops % 600 == 0:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the next reads wait for the disk
        batch = [rng.choice([one_read, one_read, one_pread, one_write])() for _ in range(48)]
        await asyncio.gather(*batch)
        ops += len(batch)
    for _ in range(20):
        await asyncio.sleep(0)
    for buf, snapshot in cancelled_bufs:
        assert buf == snapshot, "a buffer changed after its read was cancelled"
    with open(out_path, "rb") as f:
        data = f.read()
    for b in range(nblocks):
        got = data[b * block:(b + 1) * block]
        n = written.get(b, 0)
        assert got[:n] == bytes([b % 251 + 1]) * n
        assert got[n:] == bytes(block - n), f"block {b}: bytes written by a write that reported {n}"
    assert counts["read done"] and counts["write cancelled"]
    # (Reads the page cache serves at once end before any cancellation can
    # reach them: only through the ring are some sure to be cancelled.)
    assert counts["read cancelled"] or reads == "direct first"


@pytest.mark.parametrize("io", ["direct first", "ring"])
@pytest.mark.parametrize("blocking", [False, True], ids=["nonblocking", "blocking"])
async def test_cancellation_storm_on_a_pipe_reassembles_the_pattern(pipe, blocking, io, monkeypatch):
    """Writer and reader of one pipe on the same loop, every write and read
    cancelled at random moments: what the reads returned is exactly what the
    writes said they wrote, which is the pattern.  A read that ended cancelled
    left its sentinel buffer alone, also after more data went through.  Reads
    and writes are tried at once first (then only those that find the pipe
    empty or full can be cancelled), or all go through the ring."""
    if io == "ring":
        from aioring import _ops
        monkeypatch.setattr(_ops, "_rw_now", lambda *args: 0)  # (none done at once: the ring's turn)
    r, w = pipe
    os.set_blocking(r, blocking)
    os.set_blocking(w, blocking)
    pattern = random.Random(2).randbytes(2 * MiB)
    rng_w, rng_r = random.Random(3), random.Random(4)
    got: list[bytes] = []
    cancelled_bufs: list[tuple[bytearray, bytes]] = []

    cancelled_writes = [0]

    async def writer() -> None:
        pos = 0
        view = memoryview(pattern)
        while pos < len(pattern):
            n, cancelled = await _attempt(rng_w, aioring.write(w, view[pos:pos + _sizes(rng_w)]), 0.5)
            if cancelled:
                cancelled_writes[0] += 1
            else:
                assert n > 0
                pos += n
            for _ in range(rng_w.choice([0, 0, 0, 1, 3])):
                await asyncio.sleep(0)  # now and then the reader finds the pipe empty and waits
        os.close(w)  # the reader sees EOF once it took everything

    async def reader() -> None:
        while True:
            # now and then a large read empties the pipe, so that reads wait
            buf = _sentinel(_sizes(rng_r) if rng_r.random() < 0.7 else 65536)
            n, cancelled = await _attempt(rng_r, aioring.readinto(r, buf), 0.5)
            if cancelled:
                assert _untouched(buf), "a cancelled read wrote into its buffer"
                cancelled_bufs.append((buf, bytes(buf)))
                continue
            if n == 0:
                return
            got.append(bytes(buf[:n]))
            assert _untouched(buf[n:])

    def total() -> int:
        return sum(map(len, got))

    await _without_stall(asyncio.gather(writer(), reader()), total, "pipe storm")
    for buf, snapshot in cancelled_bufs:
        assert buf == snapshot, "a buffer changed after its read was cancelled"
    data = b"".join(got)
    assert len(data) == len(pattern), f"{len(data)} bytes read of {len(pattern)} written"
    assert data == pattern, "bytes lost, duplicated or reordered"
    assert cancelled_bufs and (cancelled_writes[0] or io == "direct first")


async def test_cancellation_storm_on_sockets_and_streams(closing):
    """Two TCP connections, both directions, every operation cancelled at
    random moments: plain socket operations (aioring.write on one end,
    sock_recv_into and sock_recv on the other) and a stream (reads of every
    kind, writes with cancelled drains) against aioring.write and sock_recv.
    Each direction reassembles its pattern exactly; a receive that ended
    cancelled never touches its buffer again."""
    a, b = map(closing, _tcp_pair())
    c, d = map(closing, _tcp_pair())
    reader, writer = await aioring.open_connection(sock=c)
    patterns = {name: random.Random(name).randbytes(MiB) for name in ("raw", "down", "up")}
    got: dict[str, list[bytes]] = {name: [] for name in patterns}
    cancelled_bufs: list[tuple[bytearray, bytes]] = []

    async def send_raw(sock: socket.socket, pattern: bytes, rng: random.Random) -> None:
        """aioring.write on the socket's fd: a result is what went out."""
        pos = 0
        view = memoryview(pattern)
        while pos < len(pattern):
            n, cancelled = await _attempt(rng, aioring.write(sock.fileno(), view[pos:pos + _sizes(rng)]), 0.5)
            if not cancelled:
                pos += n
            for _ in range(rng.choice([0, 0, 0, 1, 3])):
                await asyncio.sleep(0)  # now and then the receiver waits
        sock.shutdown(socket.SHUT_WR)

    async def recv_raw(sock: socket.socket, name: str, rng: random.Random) -> None:
        while True:
            size = _sizes(rng)
            if rng.random() < 0.5:
                buf = _sentinel(size)
                n, cancelled = await _attempt(rng, aioring.sock_recv_into(sock, buf), 0.5)
                if cancelled:
                    assert _untouched(buf)
                    cancelled_bufs.append((buf, bytes(buf)))
                    continue
                data = bytes(buf[:n])
                assert _untouched(buf[n:])
            else:
                data, cancelled = await _attempt(rng, aioring.sock_recv(sock, size), 0.5)
                if cancelled:
                    continue
            if not data:
                return
            got[name].append(data)

    async def stream_reads(rng: random.Random) -> None:
        while True:
            kind = rng.choice(["read", "readexactly", "readinto", "readinto_exactly"])
            size = _sizes(rng)
            buf = _sentinel(size)
            if kind == "read":
                aw: Awaitable[Any] = reader.read(size)
            elif kind == "readexactly":
                aw = reader.readexactly(size)
            elif kind == "readinto":
                aw = reader.readinto(buf)
            else:
                aw = reader.readinto_exactly(buf)
            try:
                res, cancelled = await _attempt(rng, aw, 0.5)
            except asyncio.IncompleteReadError as exc:
                got["down"].append(exc.partial)
                return
            if cancelled:
                if kind == "readinto":
                    assert _untouched(buf), "a cancelled readinto wrote into its buffer"
                if kind.startswith("readinto"):
                    cancelled_bufs.append((buf, bytes(buf)))
                continue
            if kind == "readinto":
                data = bytes(buf[:res])
                assert _untouched(buf[res:])
            elif kind == "readinto_exactly":
                data = bytes(buf)
            else:
                data = res
            if not data:
                return
            got["down"].append(data)

    async def stream_writes(rng: random.Random) -> None:
        pattern = patterns["up"]
        pos = 0
        while pos < len(pattern):
            n = _sizes(rng)
            writer.write(pattern[pos:pos + n])  # queued: a cancelled drain loses nothing
            pos += n
            if rng.random() < 0.3:
                await _attempt(rng, writer.drain(), 0.5)
        writer.write_eof()
        await writer.drain()

    def total() -> int:
        return sum(len(part) for parts in got.values() for part in parts)

    await _without_stall(asyncio.gather(
        send_raw(a, patterns["raw"], random.Random(5)),
        recv_raw(b, "raw", random.Random(6)),
        send_raw(d, patterns["down"], random.Random(7)),
        stream_reads(random.Random(8)),
        stream_writes(random.Random(9)),
        recv_raw(d, "up", random.Random(10)),
    ), total, "socket storm")
    for _ in range(20):
        await asyncio.sleep(0)
    for buf, snapshot in cancelled_bufs:
        assert buf == snapshot, "a buffer changed after its receive was cancelled"
    for name, pattern in patterns.items():
        data = b"".join(got[name])
        assert len(data) == len(pattern), f"{name}: {len(data)} bytes received of {len(pattern)}"
        assert data == pattern, f"{name}: bytes lost, duplicated or reordered"
    writer.close()
    await writer.wait_closed()
    assert cancelled_bufs


# ================================================ tiny rings, big loads
async def _many_file_ops(path: str, content: bytes, out_path: str, n: int, entries: int) -> None:
    """n reads and writes gathered at once on a ring of `entries` (a CQ of twice that)."""
    ring = _loops.get_ring(entries=entries)
    assert ring.cq_entries <= 2 * entries
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    out = os.open(out_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        rng = random.Random(12)
        slot = 16
        n_writes = n // 10
        n_reads = n - n_writes
        window = 64 * KiB  # a small, cached part of the file
        offsets = [rng.randrange(0, window - slot) for _ in range(n_reads)]
        into = bytearray(n_reads * slot)
        view = memoryview(into)
        payload = rng.randbytes(n_writes * slot)
        coros: list[Awaitable[int]] = [aioring.readinto(fd, view[i * slot:(i + 1) * slot], off)
                                       for i, off in enumerate(offsets)]
        coros += [aioring.write(out, payload[i * slot:(i + 1) * slot], i * slot) for i in range(n_writes)]
        order = list(range(len(coros)))
        rng.shuffle(order)
        done = [0]

        async def counted(aw: Awaitable[int]) -> int:
            res = await aw
            done[0] += 1
            return res

        results = await _without_stall(asyncio.gather(*(counted(coros[i]) for i in order)),
                                       lambda: done[0], "tiny ring")
        assert results == [slot] * len(coros)
        assert into == b"".join(content[off:off + slot] for off in offsets), "a read returned wrong bytes"
        view.release()
        assert os.pread(out, len(payload) + 1, 0) == payload, "a write went wrong"
        stats = aioring.statistics()
        assert (stats["in_flight"], stats["waiting"]) == (0, 0)
    finally:
        os.close(fd)
        os.close(out)


async def test_100k_operations_gathered_on_a_ring_of_one(file_content, disk_dir, aioring_backend):
    """100,000 file reads and writes gathered at once through a ring whose SQ
    holds 1 and CQ 2: all complete, each with its own bytes.  (The thread
    backend runs 20,000 here and 100,000 in the slow run.)"""
    path, content = file_content
    n = 100_000 if aioring_backend == "io_uring" else 20_000
    await _many_file_ops(path, content, os.path.join(disk_dir, "out.bin"), n, entries=1)


@pytest.mark.slow
@pytest.mark.backends("threads")
async def test_100k_operations_gathered_on_a_ring_of_one_threads(file_content, disk_dir):
    path, content = file_content
    await _many_file_ops(path, content, os.path.join(disk_dir, "out.bin"), 100_000, entries=1)


async def test_pipe_reads_and_writes_gathered_beyond_the_completion_queue(closing):
    """Reads and writes of 64 pipes gathered in a random order on a ring whose
    CQ holds 4: a read that waits for its write must not keep that write from
    ever being submitted.  Every read gets its write's bytes."""
    _loops.get_ring(entries=2)
    rng = random.Random(13)
    pipes = [(closing(r), closing(w)) for r, w in (os.pipe2(os.O_CLOEXEC) for _ in range(64))]
    done = [0]

    async def counted(aw: Awaitable[Any]) -> Any:
        res = await aw
        done[0] += 1
        return res

    coros: list[Awaitable[Any]] = [counted(aioring.read(r, 100)) for r, _ in pipes]
    coros += [counted(aioring.write(w, b"pipe %d" % i)) for i, (_, w) in enumerate(pipes)]
    order = list(range(len(coros)))
    rng.shuffle(order)
    tasks = [asyncio.ensure_future(coros[i]) for i in order]
    await _without_stall(asyncio.gather(*tasks), lambda: done[0], "pipe reads and writes")
    results = [t.result() for _, t in sorted(zip(order, tasks, strict=True), key=lambda p: p[0])]
    assert results[:64] == [b"pipe %d" % i for i in range(64)]
    assert results[64:] == [len(b"pipe %d" % i) for i in range(64)]


async def test_completion_queue_overflow_and_a_full_sq_of_cancels(closing):
    """On a ring whose SQ holds 1 and CQ 2: 150 receives wait on idle
    connections (plain sockets and streams); their peers then all send in the
    same iteration, so their completions overflow the CQ.  Every receive gets
    its own bytes.  Then 150 receives are cancelled in one iteration (their
    cancels overflow the SQ): each ends cancelled or with data, nothing is
    lost, and the cancelled buffers are never touched."""
    _loops.get_ring(entries=1)
    pairs = [tuple(map(closing, socket.socketpair())) for _ in range(150)]
    raw, streamed = pairs[:100], pairs[100:]
    streams = [await aioring.open_connection(sock=a) for a, _ in streamed]
    def receive_on_all() -> tuple[list[bytearray], list[asyncio.Future[Any]]]:
        bufs = [_sentinel(64) for _ in raw]
        tasks = [asyncio.ensure_future(aioring.sock_recv_into(a, buf))
                 for (a, _), buf in zip(raw, bufs, strict=True)]
        tasks += [asyncio.ensure_future(reader.readexactly(8)) for reader, _ in streams]
        return bufs, tasks

    for _ in range(2):
        bufs, tasks = receive_on_all()
        await _until(lambda: aioring.statistics()["in_flight"] >= len(pairs))
        for i, (_, b) in enumerate(pairs):
            b.send(b"%08d" % i)  # no await: all of them complete before the next harvest
        results = await _without_stall(asyncio.gather(*tasks),
                                       lambda tasks=tasks: sum(t.done() for t in tasks), "overflow")
        assert results[:100] == [8] * 100
        assert [bytes(buf[:8]) for buf in bufs] == [b"%08d" % i for i in range(100)]
        assert all(_untouched(buf[8:]) for buf in bufs)
        assert results[100:] == [b"%08d" % i for i in range(100, 150)]

    # Cancel every waiting receive in one iteration, with data racing in for some.
    bufs, tasks = receive_on_all()
    await _until(lambda: aioring.statistics()["in_flight"] >= len(pairs))
    rng = random.Random(14)
    racing = set(rng.sample(range(len(pairs)), 40))
    for i in racing:
        pairs[i][1].send(b"%08d" % i)
    _cancel_all(tasks)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    snapshots = [bytes(buf) for buf in bufs]
    for i, (_, b) in enumerate(pairs):
        if i not in racing:
            b.send(b"%08d" % i)
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, asyncio.CancelledError):
            if i < 100:
                assert _untouched(bufs[i])
            # nothing was consumed: the next receive gets the bytes
            if i < 100:
                again = await aioring.sock_recv(pairs[i][0], 64)
            else:
                again = await streams[i - 100][0].readexactly(8)
            assert again == b"%08d" % i
        else:
            assert isinstance(outcome, (int, bytes)), outcome
            assert i in racing
            data = bytes(bufs[i][:8]) if i < 100 else outcome
            assert data == b"%08d" % i
    assert [bytes(buf) for buf in bufs] == snapshots, "a buffer changed after its receive ended"
    for _, w in streams:
        w.close()
        await w.wait_closed()


# ======================================== closing under operations in flight
def _tiles(chunks: list[bytes], content: bytes) -> bool:
    return b"".join(chunks) == content[:sum(map(len, chunks))]


def _first_of_each(problems: list[tuple[str, str]]) -> str:
    """The first example of each kind of problem."""
    seen: dict[str, str] = {}
    for kind, example in problems:
        seen.setdefault(kind, example)
    return "\n".join(f"{kind}, first in {example}" for kind, example in seen.items())


def _brief(outcomes: list[Any]) -> str:
    return ", ".join(f"{len(o)} bytes" if isinstance(o, bytes) else repr(o) for o in outcomes)


async def test_closing_a_file_with_reads_in_flight(file_content):
    """Reads of an aioring file are in flight when the file is closed, and
    more are made after close() was called: each read made before returns
    its bytes, and together, in the order they were made, they tile the file
    (a read is not split by the others); each one made after raises
    ValueError, as on a closed builtin file, never an OSError from an fd that
    was already closed (another file may have that number by then)."""
    path, content = file_content
    aioring.statistics()  # the ring exists before the baseline
    fds = _fds()
    rng = random.Random(15)
    problems: list[tuple[str, str]] = []
    for round_ in range(30):
        buffering = rng.choice([0, -1, 100])
        f = await aioring.open(path, rng.choice(["rb", "r+b"]), buffering=buffering)
        if round_ % 3 == 0:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # reads wait for the disk
        sizes = [rng.choice([1, 100, 5000, 40_000, 100_000]) for _ in range(12)]
        before = [asyncio.ensure_future(f.read(n)) for n in sizes[:6]]
        await asyncio.sleep(0)
        closer = asyncio.ensure_future(f.close())
        after = [asyncio.ensure_future(f.read(n)) for n in sizes[6:]]
        FAULTS["closes"] += 1
        outcomes = await asyncio.gather(*before, *after, return_exceptions=True)
        assert await closer is None
        where = f"round {round_} (buffering={buffering}, sizes {sizes})"
        if not all(isinstance(o, bytes) for o in outcomes[:6]):
            problems.append(("a read made before close() failed", f"{where}: {_brief(outcomes[:6])}"))
        elif not _tiles(outcomes[:6], content):
            problems.append(("the reads made before close() do not tile the file", where))
        if not all(isinstance(o, ValueError) for o in outcomes[6:]):
            problems.append(("a read made after close() did not raise ValueError",
                             f"{where}: {_brief(outcomes[6:])}"))
    gc.collect()
    assert _fds() == fds, "fds leaked"
    assert not problems, "\n" + _first_of_each(problems)


async def test_reads_in_flight_together_on_one_file_each_get_contiguous_bytes(file_content):
    """What the reads made before a close() above depend on: reads of one
    aioring file made together (a large one, then a small one) run one after
    the other, so each returns contiguous bytes of the file, in the order
    they were made, also when the large one waits for the disk."""
    path, content = file_content
    problems: list[tuple[str, str]] = []
    for round_ in range(20):
        buffering = (-1, 100, 0)[round_ % 3]
        f = await aioring.open(path, "rb", buffering=buffering)
        if round_ % 2:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        large = asyncio.ensure_future(f.read(100_000))
        small = asyncio.ensure_future(f.read(10))
        got = [await large, await small]
        await f.close()
        if got != [content[:100_000], content[100_000:100_010]]:
            at = [content.find(g) for g in got]
            problems.append(("a read is split by the one made after it",
                             f"round {round_} (buffering={buffering}): the small read got the bytes at "
                             f"{at[1]}, the large one is {'' if at[0] >= 0 else 'not '}contiguous"))
    assert not problems, "\n" + _first_of_each(problems)


async def test_closing_a_file_with_writes_in_flight(disk_dir):
    """Writes are in flight when an aioring file is closed, and more are made
    after close() was called: those made before all reach the file, in order
    (the close flushes them), those made after raise ValueError and write
    nothing anywhere."""
    aioring.statistics()
    fds = _fds()
    rng = random.Random(18)
    out_path = os.path.join(disk_dir, "written.bin")
    problems: list[tuple[str, str]] = []
    for round_ in range(20):
        buffering = rng.choice([0, -1, 1000])
        f = await aioring.open(out_path, "wb", buffering=buffering)
        pieces = [bytes([65 + i]) * rng.choice([1, 700, 9000]) for i in range(10)]
        writes = [asyncio.ensure_future(f.write(p)) for p in pieces[:5]]
        await asyncio.sleep(0)
        closer = asyncio.ensure_future(f.close())
        writes += [asyncio.ensure_future(f.write(p)) for p in pieces[5:]]
        FAULTS["closes"] += 1
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert await closer is None
        where = f"round {round_} (buffering={buffering})"
        if outcomes[:5] != [len(p) for p in pieces[:5]]:
            problems.append(("a write made before close() failed", f"{where}: {_brief(outcomes[:5])}"))
        if not all(isinstance(o, ValueError) for o in outcomes[5:]):
            problems.append(("a write made after close() did not raise ValueError",
                             f"{where}: {_brief(outcomes[5:])}"))
        with open(out_path, "rb") as check:
            if check.read() != b"".join(pieces[:5]):
                problems.append(("the file does not hold what the writes made before close() wrote", where))
    gc.collect()
    assert _fds() == fds, "fds leaked"
    assert not problems, "\n" + _first_of_each(problems)


async def test_cancelled_closes_and_cancelled_async_with_blocks_release_files(file_content, disk_dir):
    """A close() cancelled at a random moment still gets what the writes
    reported onto the disk and releases the fd; tasks cancelled at random
    moments inside `async with aioring.open(...)` close their files."""
    path, _ = file_content
    aioring.statistics()
    fds = _fds()
    rng = random.Random(19)
    loop = asyncio.get_running_loop()
    out_path = os.path.join(disk_dir, "written.bin")
    for round_ in range(20):
        f = await aioring.open(out_path, "wb", buffering=rng.choice([-1, 1000]))
        pieces = [bytes([97 + i]) * rng.choice([1, 700, 9000]) for i in range(5)]
        for p in pieces:
            assert await f.write(p) == len(p)
        closer = asyncio.ensure_future(f.close())
        _cancel_after(loop, closer, rng.randrange(0, 4))
        FAULTS["closes"] += 1
        with contextlib.suppress(asyncio.CancelledError):
            await closer
        for _ in range(10):
            await asyncio.sleep(0)
        if not f.closed:
            await f.close()  # cancelled before it began: the caller closes again
        with open(out_path, "rb") as check:
            assert check.read() == b"".join(pieces), f"round {round_}: bytes lost by a cancelled close"

    async def user() -> None:
        async with aioring.open(path, "rb") as f:
            while await f.read(rng.choice([10, 4096, 100_000])):
                pass

    tasks = [asyncio.ensure_future(user()) for _ in range(60)]
    for task in tasks:
        _cancel_after(loop, task, rng.randrange(0, 40))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(o is None or isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    del tasks, task
    gc.collect()
    assert _fds() == fds, "fds leaked"


async def test_shutting_down_and_closing_sockets_with_operations_in_flight():
    """Plain sockets with a receive, an accept or a large send in flight are
    shut down and closed at random moments (a socket.socket has no close
    hook: shutdown is what ends a call another thread or task is blocked in):
    every awaiting task ends with a result or an OSError, a receive's buffer
    holds at most what the peer sent and is never touched afterwards, the
    peer sees the close, and every fd is released."""
    aioring.statistics()
    fds = _fds()
    rng = random.Random(16)
    loop = asyncio.get_running_loop()
    cases = []
    for _ in range(40):
        kind = rng.choice(["recv_into", "recv", "accept", "sendall"])
        peer = None
        buf = None
        if kind == "accept":
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(4)
            aw: Awaitable[Any] = aioring.sock_accept(sock)
        else:
            sock, peer = socket.socketpair()
            buf = _sentinel(1000)
            if kind == "recv_into":
                aw = aioring.sock_recv_into(sock, buf)
            elif kind == "recv":
                aw = aioring.sock_recv(sock, 1000)
            else:
                aw = aioring.sock_sendall(sock, b"s" * (4 * MiB))
        cases.append((kind, sock, peer, buf, asyncio.ensure_future(aw)))
    for _ in range(3):
        await asyncio.sleep(0)

    def close_it(iterations: int, sock: socket.socket, peer: socket.socket | None, peer_sends: bool) -> None:
        if iterations:
            loop.call_soon(close_it, iterations - 1, sock, peer, peer_sends)
            return
        if peer is not None and peer_sends:
            peer.send(b"last words")
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        FAULTS["closes"] += 1

    for _, sock, peer, _, _ in cases:
        close_it(rng.randrange(0, 6), sock, peer, rng.random() < 0.3)
    tasks = [case[4] for case in cases]
    outcomes = await _without_stall(asyncio.gather(*tasks, return_exceptions=True),
                                    lambda: sum(t.done() for t in tasks), "closed sockets")
    snapshots = [bytes(case[3]) if case[3] is not None else None for case in cases]
    for (kind, _, peer, buf, _), outcome in zip(cases, outcomes, strict=True):
        assert isinstance(outcome, (OSError, int, bytes, tuple, type(None))), (kind, outcome)
        if isinstance(outcome, OSError):
            continue
        if kind == "recv_into":
            assert buf[:outcome] == b"last words"[:outcome]
            assert _untouched(buf[outcome:])
        elif kind == "recv":
            assert outcome == b"last words"[:len(outcome)]
        elif kind == "accept":
            outcome[0].close()
        if peer is not None and kind != "sendall":
            peer.setblocking(False)
            try:
                assert peer.recv(MiB) == b"", "the peer received bytes nobody sent"
            except ConnectionResetError:
                pass  # closed with bytes it never read: a reset, as close(2) gives
            except BlockingIOError:
                pytest.fail(f"{kind}: the peer does not see the close")
    for _, _, peer, _, _ in cases:
        if peer is not None:
            with contextlib.suppress(OSError):
                peer.send(b"more after the close")
            peer.close()
    for _ in range(10):
        await asyncio.sleep(0)
    assert [bytes(case[3]) if case[3] is not None else None for case in cases] == snapshots
    gc.collect()
    assert _fds() == fds, ("fds leaked", {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in _fds() - fds})


async def test_closing_streams_with_operations_in_flight():
    """Streams with a read of every kind in flight, a large write going out
    and a drain waiting are closed (or aborted) at random moments: reads end
    as at EOF, drains end, wait_closed returns, the peer receives everything
    written before close() (a prefix of it after an abort), the caller's
    buffer is never touched, also when the peer sends more afterwards, and
    every fd is released."""
    aioring.statistics()
    fds = _fds()
    rng = random.Random(17)
    loop = asyncio.get_running_loop()
    cases = []
    for i in range(30):
        a, b = socket.socketpair()
        b.setblocking(False)
        reader, writer = await aioring.open_connection(sock=a)
        kind = rng.choice(["read", "readexactly", "readinto", "readinto_exactly", "readline"])
        buf = _sentinel(rng.choice([10, 100_000]))
        if kind == "read":
            aw: Awaitable[Any] = reader.read(1000)
        elif kind == "readexactly":
            aw = reader.readexactly(1000)
        elif kind == "readline":
            aw = reader.readline()
        elif kind == "readinto":
            aw = reader.readinto(buf)
        else:
            aw = reader.readinto_exactly(buf)
        read = asyncio.ensure_future(aw)
        payload = random.Random(i).randbytes(rng.choice([10, 3 * MiB]))
        writer.write(payload)
        drain = asyncio.ensure_future(writer.drain())
        cases.append((kind, a, b, writer, buf, read, drain, payload, rng.random() < 0.25))
    for _ in range(3):
        await asyncio.sleep(0)

    def close_it(iterations: int, writer: aioring.StreamWriter, abort: bool) -> None:
        if iterations:
            loop.call_soon(close_it, iterations - 1, writer, abort)
            return
        if abort:
            writer.transport.abort()
        else:
            writer.close()
        FAULTS["closes"] += 1

    for case in cases:
        close_it(rng.randrange(0, 4), case[3], case[8])
    received = [0]

    async def peer_drains(b: socket.socket) -> bytes:
        parts = []
        while True:
            data = await aioring.sock_recv(b, 256 * KiB)
            if not data:
                return b"".join(parts)
            received[0] += len(data)
            parts.append(data)

    got = await _without_stall(asyncio.gather(*(peer_drains(case[2]) for case in cases)),
                               lambda: received[0], "peers")
    tasks = [case[5] for case in cases] + [case[6] for case in cases]
    outcomes = await _without_stall(asyncio.gather(*tasks, return_exceptions=True),
                                    lambda: sum(t.done() for t in tasks), "streams")
    await _without_stall(asyncio.gather(*(case[3].wait_closed() for case in cases)), lambda: 0, "wait_closed")
    for i, (kind, a, b, _, buf, _, _, payload, abort) in enumerate(cases):
        outcome, drained = outcomes[i], outcomes[len(cases) + i]
        if isinstance(outcome, asyncio.IncompleteReadError):
            assert outcome.partial == b"", (kind, outcome)
        else:
            assert outcome in (b"", 0), (kind, outcome)
        assert _untouched(buf), f"{kind}: the buffer was written"
        assert drained is None or isinstance(drained, ConnectionError), drained
        if abort:
            assert payload.startswith(got[i])
        else:
            assert got[i] == payload, f"{kind}: the peer got {len(got[i])} of {len(payload)} bytes"
        assert a.fileno() == -1, "the stream did not close its socket"
        with contextlib.suppress(OSError):
            b.send(b"after the close")
        b.close()
    for _ in range(10):
        await asyncio.sleep(0)
    assert all(_untouched(case[4]) for case in cases), "a buffer changed after its read ended"
    gc.collect()
    assert _fds() == fds, ("fds leaked", {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in _fds() - fds})


@pytest.mark.parametrize("how", ["cancel_then_close", "close"])
def test_closing_the_loop_with_operations_in_flight(new_loop, file_content, loop_errors, how, ring_reads):
    """A loop is closed while every kind of operation is in flight (file reads
    held back by backpressure, pipe and socket receives, stream reads, a send
    into a full socket, an accept, a write into a full pipe): as asyncio.run
    ends (cancel every task, then close) or by loop.close() at once.  Nothing
    crashes or hangs, cancelled tasks see CancelledError, no receive's buffer
    is touched, data sent after the close is all still there, the buffers are
    freed afterwards, and every fd is released."""
    path, content = file_content
    new_loop().close()  # the loop library's process-wide fds exist before the baseline
    fds = _fds()
    loop = new_loop()
    made: list[Any] = []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    made.append(fd)
    pipes = [os.pipe2(os.O_CLOEXEC | (os.O_NONBLOCK if i % 2 else 0)) for i in range(6)]
    made.extend(end for p in pipes for end in p)
    sock_pairs = [socket.socketpair() for _ in range(6)]
    made.extend(s for p in sock_pairs for s in p)
    full_r, full_w = os.pipe2(os.O_CLOEXEC)
    made.extend((full_r, full_w))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    made.append(listener)
    receive_bufs: list[array.array] = []
    file_bufs: list[array.array] = []
    writers: list[Any] = []
    freed: list[weakref.ref[array.array]] = []
    outcomes: dict[str, Any] = {}

    async def watched(name: str, aw: Awaitable[Any]) -> None:
        try:
            res = await aw
        except BaseException as exc:
            outcomes[name] = type(exc)  # not the exception: its traceback holds the buffers
            raise
        outcomes[name] = type(res)

    def buffer(size: int, into: list[array.array]) -> array.array:
        buf = array.array("B", [SENTINEL]) * size
        into.append(buf)
        freed.append(weakref.ref(buf))
        return buf

    async def setup() -> list[asyncio.Task[Any]]:
        _loops.get_ring(entries=4)
        tasks = []
        for i, (r, _) in enumerate(pipes):
            tasks.append(asyncio.ensure_future(
                watched(f"pipe{i}", aioring.readinto(r, buffer(100, receive_bufs)))))
        for i, (a, _) in enumerate(sock_pairs[:3]):
            tasks.append(asyncio.ensure_future(
                watched(f"sock{i}", aioring.sock_recv_into(a, buffer(100, receive_bufs)))))
        for i, (a, _) in enumerate(sock_pairs[3:5]):
            reader, writer = await aioring.open_connection(sock=a)
            writers.append(writer)  # (a writer dropped unclosed closes its connection)
            tasks.append(asyncio.ensure_future(
                watched(f"stream{i}", reader.readinto(buffer(100_000, receive_bufs)))))
        tasks.append(asyncio.ensure_future(
            watched("sendall", aioring.sock_sendall(sock_pairs[5][0], b"z" * (8 * MiB)))))
        tasks.append(asyncio.ensure_future(watched("accept", aioring.sock_accept(listener))))
        tasks.append(asyncio.ensure_future(watched("full", aioring.write(full_w, b"f" * (4 * MiB)))))
        tasks.extend(asyncio.ensure_future(
            watched(f"file{i}", aioring.readinto(fd, buffer(512, file_bufs), i * 512))) for i in range(200))
        await _until(lambda: aioring.statistics()["in_flight"] >= 14)
        return tasks

    tasks = loop.run_until_complete(setup())
    FAULTS["closes"] += 1
    if how == "cancel_then_close":
        _cancel_all(tasks)
        loop.run_until_complete(asyncio.wait(tasks, timeout=30))
        assert all(t.done() for t in tasks), "a task still waits after it was cancelled"
        for name, outcome in outcomes.items():
            if name.startswith("file") or name == "full":
                assert outcome in (int, asyncio.CancelledError), (name, outcome)
            else:
                assert outcome is asyncio.CancelledError, (name, outcome)
    loop.close()
    # Data sent now must all still be there: no cancelled receive took any.
    for i, (r, w) in enumerate(pipes):
        os.write(w, b"pipe %d" % i)
        os.set_blocking(r, False)
        try:
            assert os.read(r, 100) == b"pipe %d" % i
        except BlockingIOError:
            pytest.fail(f"pipe {i}: a read of the closed loop took the bytes")
    for i, (a, b) in enumerate(sock_pairs[:3]):
        b.send(b"sock %d" % i)
        a.setblocking(False)
        try:
            assert a.recv(100) == b"sock %d" % i
        except BlockingIOError:
            pytest.fail(f"socket {i}: a receive of the closed loop took the bytes")
    for _, b in sock_pairs[3:5]:
        b.send(b"more")
    for _ in range(3):
        gc.collect()
    assert all(buf.tobytes().count(SENTINEL) == len(buf) for buf in receive_bufs), \
        "a receive buffer was written"
    for i, data in enumerate(buf.tobytes() for buf in file_bufs):
        # done (its task may not have run since), or not at all
        if data.count(SENTINEL) != len(data) or outcomes.get(f"file{i}") is int:
            assert data == content[i * 512:(i + 1) * 512], "a file read wrote wrong bytes"
    del tasks
    receive_bufs.clear()
    file_bufs.clear()
    for thing in made:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    gc.collect()  # tasks left pending by a closed loop go, and asyncio says so
    errors = [(ctx.get("message"), ctx.get("exception")) for ctx in loop_errors
              if "destroyed but it is pending" not in ctx.get("message", "")]
    loop_errors.clear()  # (their records hold the tasks)
    assert not errors, errors
    gc.collect()
    assert not [ref for ref in freed if ref() is not None], "buffers kept after the loop closed"
    assert _fds() == fds, ("fds leaked", {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in _fds() - fds})


def test_a_closed_loop_takes_no_data_written_after_it_closed(new_loop, loop_errors):
    """Loops are closed, again and again, while reads of blocking pipes wait
    (at the pipe's position and at an offset, which a pipe ignores): once
    close() returned, no read of the closed loop takes what is written into
    the pipes afterwards, not at once and not later."""
    taken = []
    for round_ in range(150):
        loop = new_loop()
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(6)]

        async def pending(pipes=pipes) -> list[asyncio.Task[bytes]]:
            tasks = [asyncio.ensure_future(aioring.read(r, 10, -1 if i % 2 else 0))
                     for i, (r, _) in enumerate(pipes)]
            await _until(lambda: aioring.statistics()["in_flight"] >= len(pipes))
            return tasks

        tasks = loop.run_until_complete(pending())
        loop.close()
        FAULTS["closes"] += 1
        for i, (r, w) in enumerate(pipes):
            os.write(w, b"intact")
            os.set_blocking(r, False)
            try:
                os.read(r, 10)
            except BlockingIOError:
                taken.append((round_, i))
        for r, w in pipes:
            os.close(w)
            os.close(r)
        del tasks
    gc.collect()
    errors = [(ctx.get("message"), ctx.get("exception")) for ctx in loop_errors
              if "destroyed but it is pending" not in ctx.get("message", "")]
    loop_errors.clear()  # (the tasks the closed loops left pending)
    assert not errors, errors
    assert not taken, f"reads of closed loops took the bytes written afterwards: (round, pipe) {taken}"


# ======================================================================= fork
# (3.12+ warns that fork() in a process with threads may deadlock: the thread
# backend's workers and the test's own threads are such threads; the children
# here never use them.)
def _report_child(work: Callable[[], None], watchdog: int = 60) -> tuple[int, int]:
    """Fork; the child runs work() and exits 0, or 1 with its traceback on the
    report pipe (also when it hangs: faulthandler dumps its stacks there and
    ends it).  Returns (pid, read end of the report pipe)."""
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    FAULTS["forks"] += 1
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        status = 1
        try:
            os.close(report_r)
            faulthandler.dump_traceback_later(watchdog, exit=True, file=report_w)
            work()
            status = 0
        except BaseException:
            with contextlib.suppress(BaseException):
                os.write(report_w, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(report_w)
    return pid, report_r


def _reap_child(pid: int, report_r: int) -> str:
    """Wait for the child; "" if it exited 0, else what it reported."""
    parts = []
    while chunk := os.read(report_r, 65536):
        parts.append(chunk)
    os.close(report_r)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return ""
    return f"child exited with {code}: " + b"".join(parts).decode(errors="replace")


def _child_uses_aioring(make_loop: Callable[[], asyncio.AbstractEventLoop], path: str, content: bytes,
                        parent_pipe_w: int, message: bytes) -> Callable[[], None]:
    """What a forked child does: file, pipe and socket I/O on a new loop, and
    a write into a pipe a read of the parent waits on."""

    def work() -> None:
        async def main() -> None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            got = await asyncio.gather(*(aioring.read(fd, 100, off) for off in range(0, 50_000, 1000)))
            assert got == [content[off:off + 100] for off in range(0, 50_000, 1000)]
            r, w = os.pipe2(os.O_CLOEXEC)
            assert await aioring.write(w, b"child pipe") == 10
            assert await aioring.read(r, 100) == b"child pipe"
            a, b = socket.socketpair()
            reader, writer = await aioring.open_connection(sock=a)
            for i in range(20):
                writer.write(b"%04d" % i)
                await writer.drain()
                assert await aioring.sock_recv(b, 4) == b"%04d" % i
                await aioring.sock_sendall(b, b"back")
                assert await reader.readexactly(4) == b"back"
            writer.close()
            await writer.wait_closed()
            assert await aioring.write(parent_pipe_w, message) == len(message)
            for x in (fd, r, w):
                os.close(x)
            b.close()

        loop = make_loop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    return work


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
async def test_fork_with_operations_in_flight(file_content, closing, ring_reads):
    """The parent forks several times, from its loop and from another thread,
    while it has pipe reads, a stream read, a large stream write and file
    reads held back by backpressure in flight.  Each child uses aioring on
    its own loop (and writes into a pipe one of the parent's reads waits on)
    and exits cleanly; the parent's operations all complete correctly, each
    pipe read with its child's message."""
    path, content = file_content
    make_loop = _loop_kind()
    loop = asyncio.get_running_loop()
    _loops.get_ring(entries=4)
    forks = 4
    pipes = [tuple(map(closing, os.pipe2(os.O_CLOEXEC | (os.O_NONBLOCK if i % 2 else 0))))
             for i in range(forks + 1)]
    bufs = [_sentinel(64) for _ in pipes]
    pipe_reads = [asyncio.ensure_future(aioring.readinto(r, buf))
                  for (r, _), buf in zip(pipes, bufs, strict=True)]
    a, b = map(closing, socket.socketpair())
    b.setblocking(False)
    reader, writer = await aioring.open_connection(sock=a)
    stream_read = asyncio.ensure_future(reader.readexactly(6))
    big = random.Random(20).randbytes(2 * MiB)
    writer.write(big)  # the peer does not read yet: the send stays in flight
    fd = closing(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    rng = random.Random(21)
    offsets = [rng.randrange(0, len(content) - 512) for _ in range(400)]
    file_reads = asyncio.ensure_future(asyncio.gather(*(aioring.read(fd, 512, off) for off in offsets)))
    await asyncio.sleep(0)
    assert aioring.statistics()["in_flight"] >= 3

    failures = []
    for k in range(forks):
        child_work = _child_uses_aioring(make_loop, path, content, pipes[k][1], b"child %d" % k)
        pid, report = _report_child(child_work)
        # The parent goes on with its operations while the child runs.
        more = asyncio.ensure_future(asyncio.gather(*(aioring.read(fd, 100, off) for off in offsets[:50])))
        failures.append(await loop.run_in_executor(None, _reap_child, pid, report))
        assert await more == [content[off:off + 100] for off in offsets[:50]]

    # One more, forked by another thread while the loop is busy.
    busy = asyncio.ensure_future(asyncio.gather(*(aioring.read(fd, 512, off) for off in offsets * 5)))
    child_work = _child_uses_aioring(make_loop, path, content, pipes[forks][1], b"child %d" % forks)
    failures.append(await loop.run_in_executor(None, lambda: _reap_child(*_report_child(child_work))))
    assert await busy == [content[off:off + 512] for off in offsets * 5]

    assert not [f for f in failures if f], failures
    counts = await asyncio.gather(*pipe_reads)
    for k, (n, buf) in enumerate(zip(counts, bufs, strict=True)):
        message = b"child %d" % k
        assert (n, bytes(buf[:n])) == (len(message), message), f"pipe {k}"
        assert _untouched(buf[n:])
    assert await file_reads == [content[off:off + 512] for off in offsets]
    got = []
    while sum(map(len, got)) < len(big):
        got.append(await aioring.sock_recv(b, MiB))
    assert b"".join(got) == big, "the parent's stream write was damaged"
    await aioring.sock_sendall(b, b"answer")
    assert await stream_read == b"answer"
    writer.close()
    await writer.wait_closed()


# ========================================================= a loop per thread
def test_a_loop_per_thread_in_8_threads(new_loop, file_content, disk_dir):
    """Eight threads each run their own loop at once, each doing file reads
    and writes, pipe and socket I/O, a stream echo and some cancellations
    through aioring: every result is correct, and every fd comes back."""
    path, content = file_content
    new_loop().close()
    fds = _fds()
    nthreads = 8
    barrier = threading.Barrier(nthreads, timeout=60)
    results: dict[int, Any] = {}

    async def work(i: int) -> int:
        rng = random.Random(200 + i)
        barrier.wait()  # all loops run at once from here
        checked = 0
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        mine = os.path.join(disk_dir, f"thread{i}.bin")
        data = rng.randbytes(300 * KiB)
        r, w = os.pipe2(os.O_CLOEXEC)
        a, b = socket.socketpair()
        try:
            async with aioring.open(mine, "wb") as f:
                await f.write(data)
            async with aioring.open(mine, "rb") as f:
                assert await f.read() == data
            offsets = [rng.randrange(0, len(content) - 4096) for _ in range(300)]
            got = await asyncio.gather(*(aioring.read(fd, 4096, off) for off in offsets))
            assert got == [content[off:off + 4096] for off in offsets]
            checked += len(offsets)
            reader, writer = await aioring.open_connection(sock=a)
            for _ in range(100):
                frame = rng.randbytes(rng.choice([1, 100, 5000, 70_000]))
                writer.write(len(frame).to_bytes(4, "big") + frame)
                header = await aioring.sock_recv(b, 4)
                while len(header) < 4:
                    header += await aioring.sock_recv(b, 4 - len(header))
                n = int.from_bytes(header, "big")
                body = bytearray(n)
                view = memoryview(body)
                pos = 0
                while pos < n:
                    pos += await aioring.sock_recv_into(b, view[pos:])
                view.release()
                assert body == frame
                await aioring.sock_sendall(b, body)
                assert await reader.readexactly(n) == frame
                checked += 1
                # a read cancelled while it waits loses nothing
                pending = asyncio.ensure_future(aioring.read(r, 10))
                await asyncio.sleep(0)
                _cancel_after(asyncio.get_running_loop(), pending, 0)
                try:
                    early = await pending
                except asyncio.CancelledError:
                    early = b""
                await aioring.write(w, b"t%d" % i)
                assert early + (await aioring.read(r, 10) if not early else b"") == b"t%d" % i
            writer.close()
            await writer.wait_closed()
        finally:
            for x in (fd, r, w):
                os.close(x)
            b.close()
            os.unlink(mine)
        return checked

    def run(i: int) -> None:
        loop = new_loop()
        try:
            results[i] = loop.run_until_complete(work(i))
        except BaseException as exc:
            results[i] = exc
            barrier.abort()
        finally:
            loop.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = {i: r for i, r in results.items() if not isinstance(r, int)}
    assert not failed, failed
    assert sorted(results) == list(range(nthreads))
    gc.collect()
    assert _fds() == fds, "fds leaked"


# ===================================================== KeyboardInterrupt
def _interrupt_when_idle(main_thread: int, main_tid: int, ready: threading.Event) -> threading.Thread:
    """A thread that, once `ready` is set and the main thread sleeps in
    epoll_wait (its loop idle, a read pending), sends SIGINT to it."""

    def run() -> None:
        if not ready.wait(60):
            return
        for _ in range(1_000_000):
            try:
                with open(f"/proc/self/task/{main_tid}/wchan") as f:
                    if "epoll" in f.read():
                        break
            except OSError:
                break
        FAULTS["signals"] += 1
        FAULTS["keyboard interrupts"] += 1
        signal.pthread_kill(main_thread, signal.SIGINT)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wchan_works() -> bool:
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/wchan") as f:
            f.read()
    except OSError:
        return False
    return True


def _after_interrupt_checks(new_loop, pipe: tuple[int, int], buf: bytearray, file: tuple[str, bytes]) -> None:
    """The interrupted read took nothing, its buffer stays as it was, and a
    new loop does I/O through aioring."""
    r, w = pipe
    assert _untouched(buf), "the interrupted read wrote into its buffer"
    os.write(w, b"after the interrupt")
    os.set_blocking(r, False)
    try:
        assert os.read(r, 100) == b"after the interrupt"
    except BlockingIOError:
        pytest.fail("the interrupted read took the bytes written after its loop closed")
    assert _untouched(buf)
    path, content = file
    loop = new_loop()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            assert loop.run_until_complete(aioring.read(fd, 1000, 500)) == content[500:1500]
        finally:
            os.close(fd)
        r2, w2 = os.pipe2(os.O_CLOEXEC)
        loop.run_until_complete(aioring.write(w2, b"new loop"))
        assert loop.run_until_complete(aioring.read(r2, 100)) == b"new loop"
        os.close(r2)
        os.close(w2)
    finally:
        loop.close()


@pytest.mark.skipif(not hasattr(asyncio, "Runner"), reason="asyncio.Runner is 3.11+")
def test_ctrl_c_during_a_read_under_asyncio_runner(new_loop, pipe, file_content):
    """SIGINT arrives while the only task waits for a ring read: asyncio.Runner
    cancels the task, run() raises KeyboardInterrupt, the runner closes the
    loop and its ring; the read took no byte and left its buffer alone, and a
    new loop works."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler or not _wchan_works():
        pytest.skip("needs Python's own SIGINT handling and /proc/<tid>/wchan")
    r, _ = pipe
    buf = _sentinel(64)
    ready = threading.Event()
    outcome: list[Any] = []

    async def main() -> None:
        read = asyncio.ensure_future(aioring.readinto(r, buf))
        await _until(lambda: aioring.statistics()["in_flight"] >= 1)
        ready.set()
        try:
            await read
        except BaseException as exc:
            outcome.append(type(exc))
            raise

    thread = _interrupt_when_idle(threading.main_thread().ident, threading.get_native_id(), ready)
    try:
        with pytest.raises(KeyboardInterrupt), asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(main())
    finally:
        ready.set()
        thread.join()
    assert outcome == [asyncio.CancelledError]
    _after_interrupt_checks(new_loop, pipe, buf, file_content)


def test_ctrl_c_during_a_read_with_the_default_handler(new_loop, pipe, file_content):
    """SIGINT with Python's default handler while run_until_complete waits for
    a ring read: KeyboardInterrupt comes out of run_until_complete; then,
    as asyncio.run does, the task is cancelled and run to its end (it sees
    CancelledError, it does not hang) and the loop closes; the read took no
    byte and left its buffer alone, and a new loop works."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler or not _wchan_works():
        pytest.skip("needs Python's own SIGINT handling and /proc/<tid>/wchan")
    r, _ = pipe
    buf = _sentinel(64)
    ready = threading.Event()
    loop = new_loop()

    async def main() -> int:
        read = asyncio.ensure_future(aioring.readinto(r, buf))
        await _until(lambda: aioring.statistics()["in_flight"] >= 1)
        ready.set()
        return await read

    task = loop.create_task(main())
    thread = _interrupt_when_idle(threading.main_thread().ident, threading.get_native_id(), ready)
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(task)
    finally:
        ready.set()
        thread.join()
    assert not task.done()
    pending = list(asyncio.all_tasks(loop))
    _cancel_all(pending)
    loop.run_until_complete(asyncio.wait(pending, timeout=30))
    assert all(t.cancelled() for t in pending), "a task did not end after it was cancelled"
    del pending
    loop.close()
    _after_interrupt_checks(new_loop, pipe, buf, file_content)


# ============================================================== EINTR
def test_signals_during_heavy_io_never_surface(new_loop, file_content, disk_dir, loop_errors):
    """A SIGALRM handler runs every 50 us (setitimer) while loops do file
    reads (many from the disk), writes, fsyncs, stats, opens and closes, pipe
    transfers, a stream echo and socket calls, on fresh loops (whose rings
    start their kernel workers under the signals), and while loops with
    operations in flight are closed: no call raises InterruptedError, an
    OSError or anything else, every byte arrives, and a closed loop's reads
    take nothing written afterwards."""
    path, content = file_content
    delivered = [0]

    def on_alarm(signum: int, frame: Any) -> None:
        delivered[0] += 1

    async def files(rng: random.Random, i: int, reads: int) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            offsets = [rng.randrange(0, len(content) - 8192) for _ in range(reads)]
            got = await asyncio.gather(*(aioring.read(fd, 8192, off) for off in offsets))
            assert got == [content[off:off + 8192] for off in offsets]
        finally:
            os.close(fd)
        out = os.path.join(disk_dir, f"eintr{i}.bin")
        data = rng.randbytes(64 * KiB)
        async with aioring.open(out, "wb") as f:
            await f.write(data)
            await f.flush()
            await aioring.fsync(f.fileno())
        assert (await aioring.os.stat(out)).st_size == len(data)
        async with aioring.open(out, "rb") as f:
            assert await f.read() == data
        await aioring.os.remove(out)

    async def pipes_and_sockets(rng: random.Random) -> None:
        data = rng.randbytes(MiB)
        r, w = os.pipe2(os.O_CLOEXEC)  # blocking: the kernel (or a worker) waits in the call
        try:
            async def pump() -> None:
                view = memoryview(data)
                while view:
                    view = view[await aioring.write(w, view):]

            async def drain() -> bytes:
                parts = []
                while sum(map(len, parts)) < len(data):
                    parts.append(await aioring.read(r, 65536))
                return b"".join(parts)

            assert (await asyncio.gather(pump(), drain()))[1] == data
        finally:
            os.close(r)
            os.close(w)
        a, b = socket.socketpair()
        try:
            reader, writer = await aioring.open_connection(sock=a)
            for _ in range(30):
                frame = rng.randbytes(rng.choice([10, 5000, 100_000]))
                writer.write(frame)
                got = b""
                while len(got) < len(frame):
                    got += await aioring.sock_recv(b, len(frame) - len(got))
                await aioring.sock_sendall(b, got)
                assert await reader.readexactly(len(frame)) == frame
            writer.close()
            await writer.wait_closed()
        finally:
            b.close()

    def on_a_fresh_loop(aw: Awaitable[Any]) -> Any:
        loop = new_loop()
        try:
            return loop.run_until_complete(aw)
        finally:
            loop.close()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        rng = random.Random(23)
        for _ in range(3):
            on_a_fresh_loop(pipes_and_sockets(rng))
        for i in range(30):
            on_a_fresh_loop(files(rng, i, 64))
        # Closing loops whose rings hold operations in flight, under signals.
        for _ in range(5):
            loop = new_loop()
            pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(8)]

            async def pending(pipes=pipes) -> list[asyncio.Task[bytes]]:
                tasks = [asyncio.ensure_future(aioring.read(r, 10)) for r, _ in pipes]
                await _until(lambda: aioring.statistics()["in_flight"] >= len(pipes))
                return tasks

            tasks = loop.run_until_complete(pending())
            loop.close()
            for r, w in pipes:
                os.write(w, b"intact")
                os.set_blocking(r, False)
                try:
                    assert os.read(r, 10) == b"intact"
                except BlockingIOError:
                    pytest.fail("a read of a closed loop took the bytes written after the close")
                finally:
                    os.close(r)
                    os.close(w)
            del tasks
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, previous)
        FAULTS["signals"] += delivered[0]
    gc.collect()
    errors = [(ctx.get("message"), ctx.get("exception")) for ctx in loop_errors
              if "destroyed but it is pending" not in ctx.get("message", "")]
    loop_errors.clear()  # (the tasks the closed loops left pending)
    assert not errors, errors
    assert delivered[0] > 0
