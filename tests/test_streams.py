"""Streams on the ring, compared with asyncio's own streams.

Many tests run twice per loop, with `impl` = "aioring" and "asyncio": the same
code against aioring's streams and against asyncio's, so a test states
asyncio's behaviour and checks that aioring's is the same."""

from __future__ import annotations

import array
import gc
import asyncio
import contextlib
import functools
import os
import random
import resource
import select
import socket
import struct
import sys
import tempfile
import threading

import pytest

import aioring
from aioring import statistics
from test_ops import assert_stands_in

MiB = 1 << 20
IMPLS = ["aioring", "asyncio"]


# ------------------------------------------------------------------ helpers
@functools.cache
def _payload(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def _counter_pattern(nbytes: int) -> bytes:
    return array.array("I", range(nbytes // 4)).tobytes()


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _tcp_pair(keep) -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair (blocking; the streams make theirs non-blocking)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = keep(socket.socket())
        client.connect(listener.getsockname())
        server, _ = listener.accept()
    keep(server)
    return client, server


async def _streams(impl: str, sock: socket.socket, **kwargs):
    """(reader, writer) of `impl` on a connected socket."""
    if impl == "aioring":
        return await aioring.open_connection(sock=sock, **kwargs)
    return await asyncio.open_connection(sock=sock, **kwargs)


def _selector_loop() -> bool:
    """Whether the running loop is asyncio's own (not uvloop)."""
    return isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop)


async def _close(writer) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


def _recv_all_blocking(sock: socket.socket) -> bytes:
    sock.setblocking(True)
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


async def _echo_handler(reader, writer) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


class _Handlers:
    """An echo handler that knows when its connections ended, so a test can
    close the server after them (the race with close() has its own test)."""

    def __init__(self) -> None:
        self.running = 0
        self.started = 0
        self._idle: asyncio.Future[None] | None = None

    async def __call__(self, reader, writer) -> None:
        self.running += 1
        self.started += 1
        try:
            await _echo_handler(reader, writer)
        finally:
            self.running -= 1
            if not self.running and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)

    async def idle(self, started: int) -> None:
        assert self.started == started
        if self.running:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle
        await asyncio.sleep(0)  # the server forgets a closed connection one iteration later


@contextlib.asynccontextmanager
async def _echo_server(impl: str, **kwargs):
    if impl == "aioring":
        server = await aioring.start_server(_echo_handler, "127.0.0.1", 0, **kwargs)
    else:
        server = await asyncio.start_server(_echo_handler, "127.0.0.1", 0, **kwargs)
    async with server:
        yield server.sockets[0].getsockname()
        server.close()  # the handlers end with their clients


async def _connect(impl: str, address):
    if impl == "aioring":
        return await aioring.open_connection(*address)
    return await asyncio.open_connection(*address)


# ---------------------------------------------------------------------- echo
async def _read_back(reader, size: int, how: str) -> bytes:
    if how == "readexactly":
        return await reader.readexactly(size)
    if how == "read":
        return await reader.read()
    buf = bytearray(size)
    if how == "readinto_exactly":
        assert await reader.readinto_exactly(buf) == size
        return bytes(buf)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = await reader.readinto(view[got:])
        assert n > 0, f"EOF after {got} of {size} bytes"
        got += n
    return bytes(buf)


ECHO_CASES = [(size, client, server, "readexactly")
              for size in (1, 1000, 65535, 65537, MiB + 3)
              for client, server in (("aioring", "aioring"), ("aioring", "asyncio"), ("asyncio", "aioring"))]
ECHO_CASES += [(MiB + 3, "aioring", "aioring", how) for how in ("read", "readinto", "readinto_exactly")]
ECHO_CASES += [(64 * MiB, "aioring", "aioring", "readinto_exactly")]


@pytest.mark.parametrize("size,client,server,how", ECHO_CASES)
async def test_echo_checked_byte_for_byte(size, client, server, how):
    """Random payloads through an echo server, with aioring and asyncio on
    either side: every byte comes back, then EOF."""
    payload = _payload(size)
    async with _echo_server(server) as address:
        reader, writer = await _connect(client, address)

        async def send():
            rng = random.Random(size)
            view = memoryview(payload)
            pos = 0
            while pos < size:  # writes of random sizes, drained now and then
                n = rng.choice([1, 100, 4096, 65536, 1 << 20])
                writer.write(view[pos:pos + n])
                pos += n
                if rng.random() < 0.3:
                    await writer.drain()
            await writer.drain()
            writer.write_eof()

        sender = asyncio.ensure_future(send())
        got = await _read_back(reader, size, how)
        await sender
        if how != "read":
            assert await reader.read() == b""
        assert reader.at_eof()
        await _close(writer)
    assert len(got) == size
    assert got == payload


# ------------------------------------------------------- many connections
@pytest.mark.parametrize("idle_first", [False, True], ids=["talking", "idle-first"])
async def test_1000_concurrent_connections_on_one_loop(idle_first):
    """1000 clients on one loop, each sends a line and reads its echo.  With
    idle_first, all 1000 connections are made and all 1000 handlers wait for
    their line before any client writes: a receive waiting for a peer must not
    keep other operations out of the ring."""
    clients = 1000
    needed = 2 * clients + 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {needed}")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        statistics()  # the ring exists
        before = _open_fds()
        served = started = 0
        loop = asyncio.get_running_loop()
        all_started = loop.create_future()
        all_connected = loop.create_future()
        connected = 0

        async def handler(reader, writer):
            nonlocal served, started
            started += 1
            if started == clients:
                all_started.set_result(None)
            line = await reader.readline()
            writer.write(line)
            await writer.drain()
            served += 1
            writer.close()
            await writer.wait_closed()

        server = await aioring.start_server(handler, "127.0.0.1", 0, backlog=clients)
        address = server.sockets[0].getsockname()
        done = 0

        async def client(i):
            nonlocal done, connected
            reader, writer = await aioring.open_connection(*address)
            connected += 1
            if connected == clients:
                all_connected.set_result(None)
            if idle_first:
                await all_connected
                await all_started  # every handler waits in readline()
            message = b"client %d says %s\n" % (i, b"x" * (i % 97))
            writer.write(message)
            assert await reader.readline() == message
            assert await reader.read() == b""
            writer.close()
            await writer.wait_closed()
            done += 1

        await _without_stalling(asyncio.gather(*(client(i) for i in range(clients))),
                                lambda: (done, connected, started, statistics()["completions"]))
        assert done == served == clients
        server.close()
        await server.wait_closed()
        assert _open_fds() == before
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _without_stalling(aw, progress, stall: float = 5.0):
    """Await `aw`; fail (instead of hanging the suite) if `progress()` stays the
    same for `stall` seconds.  Not a timing assert: only a deadlock guard."""
    task = asyncio.ensure_future(aw)
    last = progress()
    while True:
        done, _ = await asyncio.wait({task}, timeout=stall)
        if done:
            return task.result()
        now = progress()
        if now == last:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)
            pytest.fail(f"no progress for {stall} s: deadlocked at {now} ({statistics()})")
        last = now


# ---------------------------------------------------------------- half-close
@pytest.mark.parametrize("impl", IMPLS)
async def test_half_close_then_the_peer_answers(socks, impl):
    a, b = _tcp_pair(socks)
    reader_a, writer_a = await _streams(impl, a)
    reader_b, writer_b = await _streams(impl, b)
    assert writer_a.can_write_eof()
    writer_a.write(b"question, then EOF")
    writer_a.write_eof()
    with pytest.raises(RuntimeError) as info:
        writer_a.write(b"more")
    assert str(info.value) == "Cannot call write() after write_eof()"
    assert await reader_b.read() == b"question, then EOF"
    assert reader_b.at_eof()
    writer_b.write(b"the answer " * 1000)
    await writer_b.drain()
    writer_b.write_eof()
    assert await reader_a.read() == b"the answer " * 1000
    await _close(writer_a)
    await _close(writer_b)


@pytest.mark.parametrize("impl", IMPLS)
async def test_write_eof_reaches_a_plain_socket_after_the_buffered_data(socks, impl):
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    payload = _payload(3 * MiB)
    writer.write(payload)
    writer.write_eof()  # with 3 MiB still buffered: the shutdown waits for them
    got = await asyncio.to_thread(_recv_all_blocking, b)
    assert got == payload
    b.sendall(b"still open the other way")
    b.shutdown(socket.SHUT_WR)
    assert await reader.read() == b"still open the other way"
    await _close(writer)


async def test_reads_of_what_already_arrived_take_it_at_once(socks):
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    statistics()
    b.sendall(b"frame-one|frame-two")
    await asyncio.to_thread(_until_readable, a)
    before = statistics()["submit_calls"], statistics()["completions"]
    assert await reader.readuntil(b"|") == b"frame-one|"
    buf = bytearray(9)
    assert await reader.readinto_exactly(buf) == 9 and buf == b"frame-two"
    b.shutdown(socket.SHUT_WR)
    await asyncio.to_thread(_until_readable, a)
    assert await reader.read() == b""
    assert reader.at_eof()
    assert (statistics()["submit_calls"], statistics()["completions"]) == before  # no ring op
    await _close(writer)


async def test_the_rest_of_a_frame_already_arrived_is_taken_at_once(socks):
    """The rest of a large frame whose start was read with its header, all
    in the socket by the time it is read: taken without a ring operation."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    payload = _payload(70_000)
    b.sendall(struct.pack(">Q", len(payload)) + payload[:1000])
    hdr = bytearray(8)
    assert await reader.readinto_exactly(hdr) == 8
    while len(reader._buffer) < 1000:  # (the frame's start, received with its header)
        await asyncio.sleep(0)
    b.sendall(payload[1000:])
    await asyncio.to_thread(_until_readable, a)
    statistics()
    before = statistics()["submit_calls"], statistics()["completions"]
    buf = bytearray(struct.unpack(">Q", hdr)[0])
    assert await reader.readinto_exactly(buf) == len(payload) and buf == payload
    if aioring.backend() == "io_uring":
        assert (statistics()["submit_calls"], statistics()["completions"]) == before  # no ring op
    await _close(writer)


async def test_readinto_exactly_from_the_buffer_keeps_a_coroutines_ways(socks):
    """readinto_exactly of bytes already buffered: fills a bytearray, a
    slice of one and a buffer of another format alike; an exception set on the reader comes first, as
    asyncio's readexactly raises it; and the method is a coroutine function
    whose call, never awaited, warns as a coroutine's does."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    assert asyncio.iscoroutinefunction(reader.readinto_exactly)
    assert asyncio.iscoroutinefunction(aioring.StreamReader.readinto_exactly)
    data = bytes(range(64))
    b.sendall(data)
    assert await reader.readexactly(4) == data[:4]
    while len(reader._buffer) < 60:
        await asyncio.sleep(0)
    buf = bytearray(4)
    assert await reader.readinto_exactly(buf) == 4 and buf == data[4:8]
    ints = array.array("i", bytes(8))
    assert await reader.readinto_exactly(memoryview(ints)) == 8 and ints.tobytes() == data[8:16]
    part = bytearray(12)
    assert await reader.readinto_exactly(memoryview(part)[2:10]) == 8 and part[2:10] == data[16:24]
    assert await reader.readinto_exactly(bytearray()) == 0
    with pytest.warns(RuntimeWarning, match="was never awaited"):
        reader.readinto_exactly(bytearray(4))
        gc.collect()
    reader.set_exception(ValueError("set"))
    with pytest.raises(ValueError, match="set"):
        await reader.readinto_exactly(bytearray(4))
    assert bytes(reader._buffer) == data[24:]  # (nothing taken)
    await _close(writer)


def _until_readable(sock: socket.socket) -> None:
    select.select([sock], [], [])


# -------------------------------------------------------------------- resets
@pytest.mark.parametrize("in_flight", [True, False], ids=["read-in-flight", "read-after"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_reset_peer_raises_connection_reset_error(socks, impl, in_flight, loop_errors):
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    b.sendall(b"before the reset")
    assert await reader.readexactly(16) == b"before the reset"
    if in_flight:
        pending = asyncio.ensure_future(reader.read(100))
        await asyncio.sleep(0)
        _reset(b)
    else:
        _reset(b)
        pending = asyncio.ensure_future(reader.read(100))
    with pytest.raises(ConnectionResetError):
        await pending
    with pytest.raises(ConnectionResetError):  # the error stays, as asyncio's reader keeps it
        await reader.readexactly(1)
    assert isinstance(reader.exception(), ConnectionResetError)
    if impl == "aioring" or _selector_loop():
        writer.write(b"to nobody")  # ignored (uvloop's own transport raises RuntimeError here)
    with pytest.raises(ConnectionResetError):
        await writer.drain()
    await _close(writer)
    gc_collect()
    assert loop_errors == []


@pytest.mark.parametrize("how", ["data", "eof", "reset"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_what_first_comes_reaches_a_read_that_waited_from_the_start(socks, impl, how, loop_errors):
    """A connection that has received nothing yet waits without a buffer of
    its own: its first bytes, EOF or a reset reach the waiting read as with
    asyncio's streams, and the reads after it go on as usual."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    pending = asyncio.ensure_future(reader.read(100))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not pending.done()
    if how == "data":
        b.sendall(b"first")
        assert await pending == b"first"
        b.sendall(b"second")
        assert await reader.readexactly(6) == b"second"
    elif how == "eof":
        b.shutdown(socket.SHUT_WR)
        assert await pending == b""
        assert reader.at_eof()
    else:
        _reset(b)
        with pytest.raises(ConnectionResetError):
            await pending
    await _close(writer)
    assert loop_errors == []


@pytest.mark.parametrize("op", ["readinto", "readinto_exactly"])
async def test_reset_during_readinto(socks, op, loop_errors):
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    buf = bytearray(100)
    b.sendall(b"partial")
    pending = asyncio.ensure_future(getattr(reader, op)(buf))
    await asyncio.sleep(0)
    _reset(b)
    if op == "readinto":
        assert await pending == 7  # what came before the reset
        assert buf[:7] == b"partial"
        with pytest.raises(ConnectionResetError):
            await reader.readinto(buf)
    else:
        with pytest.raises(ConnectionResetError):
            await pending
    with pytest.raises(ConnectionResetError):
        await reader.read(1)
    await _close(writer)
    gc_collect()
    assert loop_errors == []


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_writing_to_a_gone_peer_raises_at_a_write_or_drain(socks, impl, how, loop_errors):
    """No reads: the writes alone find out.  BrokenPipeError or
    ConnectionResetError from write() or drain(), as asyncio's, and nothing
    for the loop's exception handler."""
    a, b = _tcp_pair(socks)
    _, writer = await _streams(impl, a)
    if how == "reset":
        _reset(b)
    else:
        b.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for _ in range(1000):
            writer.write(b"x" * 10_000)
            await writer.drain()
            await asyncio.sleep(0)  # a yield, so that the sends complete
    await _close(writer)
    gc_collect()
    assert loop_errors == []


def gc_collect() -> None:
    import gc

    gc.collect()


# -------------------------------------------------------------- cancellation
async def _one_read(reader, op: str, n: int) -> tuple[bytes, bool]:
    """(bytes consumed, at EOF)."""
    try:
        if op == "readexactly":
            return await reader.readexactly(n), False
        if op == "read":
            data = await reader.read(n)
            return data, not data
        buf = bytearray(n)
        if op == "readinto":
            k = await reader.readinto(buf)
            return bytes(buf[:k]), k == 0
        await reader.readinto_exactly(buf)
        return bytes(buf), False
    except asyncio.IncompleteReadError as exc:
        return exc.partial, True


def _cancel_after(loop, task, iterations: int) -> None:
    if iterations == 0:
        task.cancel()
    else:
        loop.call_soon(_cancel_after, loop, task, iterations - 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("how", ["call_soon", "wait_for"])
async def test_cancelled_reads_reassemble_the_stream_exactly(socks, seed, how):
    """A peer thread streams a counter pattern over 8 MiB.  Reads of random
    kinds and sizes are cancelled at random moments (after k loop iterations,
    or by wait_for timeouts from 0 up); the reader goes on.  What the reads
    returned is the stream: nothing lost, nothing twice."""
    loop = asyncio.get_running_loop()
    pattern = _counter_pattern(8 * MiB)
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)

    def peer():
        rng = random.Random(seed * 1000)
        view = memoryview(pattern)
        pos = 0
        try:
            while pos < len(pattern):
                n = rng.choice([1, 13, 1000, 65536, 500_000])
                b.sendall(view[pos:pos + n])
                pos += n
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    thread = threading.Thread(target=peer)
    thread.start()
    rng = random.Random(seed)
    parts: list[bytes] = []
    cancelled = completed = 0
    try:
        at_eof = False
        while not at_eof:
            op = rng.choice(["readexactly", "read", "readinto", "readinto_exactly"])
            n = rng.choice([1, 2, 7, 100, 4096, 65536, 100_000, 300_000, MiB])
            if how == "call_soon":
                task = asyncio.ensure_future(_one_read(reader, op, n))
                _cancel_after(loop, task, rng.randrange(0, 6))
                try:
                    data, at_eof = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    continue
            else:
                timeout = rng.choice([0, 0, 1e-6, 1e-5, 1e-4, 1e-3])
                try:
                    data, at_eof = await asyncio.wait_for(_one_read(reader, op, n), timeout)
                except asyncio.TimeoutError:
                    cancelled += 1
                    continue
            completed += 1
            parts.append(data)
    finally:
        thread.join()
        await _close(writer)
    got = b"".join(parts)
    if got != pattern:
        first = next((i for i, (x, y) in enumerate(zip(got, pattern, strict=False)) if x != y),
                     min(len(got), len(pattern)))
        pytest.fail(f"reassembled {len(got)} bytes of {len(pattern)}; first difference at byte {first}")
    assert cancelled and completed


@pytest.mark.parametrize("size", [10, 100_000], ids=["read_ahead", "into_the_buffer"])
async def test_a_cancelled_readinto_exactly_puts_its_bytes_back(socks, size):
    """Cancelled while it holds part of what it asked for (for a large
    buffer: while its receive into the caller's buffer is out): the bytes
    buffered before and those received go back in front of the buffer, in
    order, and the next read returns them with the rest."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    b.sendall(b"0123")
    assert await reader.readexactly(1) == b"0"  # "123" stays buffered
    buf = bytearray(size)
    task = asyncio.ensure_future(reader.readinto_exactly(buf))
    await asyncio.sleep(0)
    b.sendall(b"4567")
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    b.sendall(b"89ab")
    b.shutdown(socket.SHUT_WR)
    assert await reader.read() == b"123456789ab"
    await _close(writer)


@pytest.mark.parametrize("kind", ["socket", "pipe"])
async def test_large_reads_into_the_callers_buffer_arrive_whole_and_in_order(socks, kind, aioring_backend):
    """A peer writes a counter pattern in pieces of random sizes; the reader
    takes a few bytes (the rest of that receive stays buffered), then a
    large readinto_exactly (filled from many receives into the rest of the
    buffer), then readinto until EOF.  What they return is the stream, as
    the stdlib's recv_into of a blocking socket would give it."""
    pattern = _counter_pattern(600_000)
    if kind == "socket":
        a, b = _tcp_pair(socks)
        reader, writer = await aioring.open_connection(sock=a)

        def send(data: memoryview) -> None:
            b.sendall(data)

        def end() -> None:
            b.shutdown(socket.SHUT_WR)
    else:
        r, w = os.pipe()
        reader = await aioring.open_pipe_reader(r)
        writer = None

        def send(data: memoryview) -> None:
            while data:
                data = data[os.write(w, data):]

        def end() -> None:
            os.close(w)

    def peer() -> None:
        rng = random.Random(7)
        view = memoryview(pattern)
        pos = 0
        while pos < len(pattern):
            n = rng.choice([1, 100, 4096, 20_000, 70_000])
            send(view[pos:pos + n])
            pos += n
        end()

    thread = threading.Thread(target=peer)
    thread.start()
    try:
        got = bytearray(await reader.readexactly(3))
        buf = bytearray(400_000)
        assert await reader.readinto_exactly(buf) == len(buf)
        got += buf
        rest = bytearray(150_000)
        while n := await reader.readinto(rest):
            got += rest[:n]
    finally:
        thread.join()
        if writer is not None:
            await _close(writer)
        else:
            reader.close()
    assert got == pattern
    if aioring_backend == "io_uring":
        assert reader._rx._into_op is not None  # (received by the core's own path)


@pytest.mark.parametrize("impl,read", [("aioring", "readexactly"), ("aioring", "readinto_exactly"),
                                       ("asyncio", "readexactly")])
async def test_a_read_cancelled_after_bytes_arrived_leaves_them_buffered(socks, impl, read):
    """Bytes that reached the reader while its task waited for more stay in
    the buffer when the task is cancelled: the next read returns them."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    if read == "readexactly":
        task = asyncio.ensure_future(reader.readexactly(8))
    else:
        task = asyncio.ensure_future(reader.readinto_exactly(bytearray(8)))
    await asyncio.sleep(0)
    b.sendall(b"abc")
    while len(reader._buffer) < 3:  # arrived; the task waits for the rest
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    b.sendall(b"defgh")
    assert await reader.readexactly(8) == b"abcdefgh"
    await _close(writer)


# ------------------------------------------------------- reads in the core
@pytest.mark.parametrize("name", ["readinto_exactly", "readinto", "read"])
async def test_reads_in_the_core_are_coroutine_methods_like_their_python_ones(socks, name):
    """StreamReader.readinto_exactly, readinto and read (the core's
    StreamRead, whose reads that read ahead run without a Python frame) look
    and behave as the coroutine methods they stand for: name, docstring,
    signature, keyword calls, a coroutine that asyncio takes (named as the
    method's), that runs nothing before it is awaited, that cannot be
    awaited twice and that warns when never awaited; thrown into or closed while it waits, it lets the
    reader's waiter and the caller's buffer go and takes nothing; the
    arguments it does not take get the Python method's results and errors."""
    import warnings
    from aioring._streams import StreamReader
    python = assert_stands_in(getattr(StreamReader, name))

    def call(method, size, **kwargs):
        """A read of `size` bytes (at most, but for readinto_exactly), and its buffer (read: None)."""
        if name == "read":
            return method(size, **kwargs), None
        buf = bytearray(size)
        return method(buf, **kwargs), buf

    def got(result, buf):
        return result if buf is None else bytes(buf[:result])

    a, b = _tcp_pair(socks)
    reader, writer = await _streams("aioring", a)
    try:
        for method in (getattr(reader, name), functools.partial(python, reader)):
            b.sendall(b"abcdef")
            coro, buf = call(method, 3)
            assert got(await coro, buf) == b"abc"
            coro, buf = call(method, 3)
            assert asyncio.iscoroutine(coro)
            assert (coro.__name__, coro.__qualname__) == (name, f"StreamReader.{name}")
            with pytest.raises(StopIteration) as stop:
                coro.send(None)  # (buffered: it ends at its first step)
            assert got(stop.value.value, buf) == b"def"
            with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
                coro.send(None)
            for stop_how in ("throw", "close"):
                coro, buf = call(method, 3)
                waiter = coro.send(None)  # (nothing buffered: it waits)
                assert isinstance(waiter, asyncio.Future) and reader._waiter is waiter
                if stop_how == "throw":
                    with pytest.raises(KeyError):
                        coro.throw(KeyError("thrown"))
                else:
                    coro.close()
                assert reader._waiter is None
                if buf is not None:
                    buf.extend(b"x")  # (let go: resizable again)
            coro, _ = call(method, 3)
            with pytest.raises(KeyError):
                coro.throw(KeyError("thrown"))  # (before its first step: nothing runs)
            call(method, 3)[0].close()  # (closed unstarted: no warning)
            coro, buf = call(method, 3)
            task = asyncio.ensure_future(coro)
            b.sendall(b"ghi")
            assert got(await task, buf) == b"ghi"
            b.sendall(b"jkl")
            if name == "read":
                assert await method(n=2) == b"jk"
                assert await method(1) == b"l"
                assert await method(0) == b""
                continue
            buf = bytearray(1)
            assert await method(buf=buf) == 1 and buf == b"j"
            view = memoryview(bytearray(4))
            assert await method(view[1:3]) == 2 and view.tobytes() == b"\0kl\0"
            b.sendall(bytes(range(8)))
            ints = memoryview(bytearray(8)).cast("i")  # (not the core's path: the method's own)
            assert await method(ints) == 8 and ints.tobytes() == bytes(range(8))
            if name == "readinto":
                while_waiting = bytearray(4)
                task = asyncio.ensure_future(method(while_waiting))
                await asyncio.sleep(0)  # (its first step: it waits, holding the buffer as Python's does)
                with pytest.raises(BufferError):
                    while_waiting.extend(b"x")
                b.sendall(b"mn")
                assert await task == 2 and while_waiting == b"mn\0\0"
        if name == "read":
            bad_args: tuple = ("3", None)
        else:
            released = memoryview(bytearray(3))
            released.release()
            bad_args = (b"xyz", memoryview(b"xyz"), released, "xyz", None)
        for bad in bad_args:
            errors = []
            for method in (getattr(reader, name), functools.partial(python, reader)):
                with pytest.raises(Exception) as info:
                    await method(bad)
                errors.append((type(info.value), str(info.value)))
            assert errors[0] == errors[1], bad
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(getattr(reader, name), 1)[0]
            call(functools.partial(python, reader), 1)[0]
            gc.collect()
        assert [str(w.message) for w in caught if w.category is RuntimeWarning] == \
            [f"coroutine 'StreamReader.{name}' was never awaited"] * 2
        b.sendall(b"o")
        assert await reader.readexactly(1) == b"o"  # (nothing of it was taken by the stopped reads)
        b.shutdown(socket.SHUT_WR)
        outcomes = []
        for method in (getattr(reader, name), functools.partial(python, reader)):
            coro, buf = call(method, 5)
            try:
                outcomes.append(got(await coro, buf))  # (at EOF)
            except asyncio.IncompleteReadError as exc:
                outcomes.append((exc.partial, exc.expected))
        assert outcomes == [(b"", 5)] * 2 if name == "readinto_exactly" else [b""] * 2
    finally:
        await _close(writer)


async def test_readinto_exactly_of_a_large_buffer_is_the_python_methods(socks):
    """readinto_exactly of a buffer of at least _READ_AHEAD bytes, through the
    core's call and the Python method alike: all of it buffered, it fills the
    buffer at its first step with no ring op; partly buffered, it takes those
    bytes and receives the rest; the reader's stored exception comes first,
    nothing taken."""
    from aioring._streams import _READ_AHEAD, StreamReader
    python = StreamReader.readinto_exactly.__wrapped__
    a, b = _tcp_pair(socks)
    reader, writer = await _streams("aioring", a)
    size = _READ_AHEAD + 5
    try:
        for i, method in enumerate((reader.readinto_exactly, functools.partial(python, reader))):
            data = bytes((i + k) % 251 for k in range(2 * size))
            reader.feed_data(data)  # (as the receive does)
            before = statistics()
            buf = bytearray(size)
            coro = method(buf)
            with pytest.raises(StopIteration) as stop:
                coro.send(None)
            assert stop.value.value == size and buf == data[:size]
            view = memoryview(bytearray(size + 2))
            assert await method(view[1:-1]) == size and view[1:-1] == data[size:]
            if aioring.backend() == "io_uring":
                assert (statistics()["submit_calls"], statistics()["completions"]) == \
                    (before["submit_calls"], before["completions"])  # (no ring op)
            reader.feed_data(data[:100])
            task = asyncio.ensure_future(method(buf))
            await asyncio.sleep(0)
            assert not task.done()  # (waits for the rest)
            b.sendall(data[100:size])
            assert await task == size and buf == data[:size]
        reader.feed_data(bytes(size))
        reader.set_exception(ValueError("set"))
        for method in (reader.readinto_exactly, functools.partial(python, reader)):
            with pytest.raises(ValueError, match="set"):
                await method(bytearray(size))
        assert len(reader._buffer) == size  # (nothing taken)
    finally:
        await _close(writer)


async def test_readinto_of_a_large_buffer_returns_every_byte_whatever_the_messages_sizes(socks):
    """readinto() of a large buffer receives straight into it while the peer
    sends bulk data and reads ahead, as a small buffer's does, once a
    receive came back small (the Receiver's _into_small, src/channel.h):
    either way the bytes come in order, none lost, as recv_into gives them."""
    from aioring._streams import _READ_AHEAD
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    rx = reader._rx
    buf = bytearray(4 * _READ_AHEAD)
    sent, received = bytearray(), bytearray()
    modes = []  # per message: _into_small after each of its readinto() calls
    try:
        sizes = [512] * 4 + [300_000] + [512] * 3 + [100_000, 7, 512]
        for i, size in enumerate(sizes):
            msg = bytes((i + k) % 251 for k in range(size))
            sent += msg
            sending = asyncio.ensure_future(asyncio.to_thread(b.sendall, msg))
            modes.append([])
            while len(received) < len(sent):
                n = await reader.readinto(buf)
                assert n > 0
                received += buf[:n]
                modes[-1].append(rx._into_small)
            await sending
        assert received == sent
        # Small messages read ahead; a bulk transfer goes straight into the
        # buffer once a read brought 16 KiB or more (its last read, a short
        # tail, may turn reading ahead on again: where the message splits is
        # the kernel's); the small messages after it read ahead again.
        assert [m[-1] for m in modes[:4]] == [True] * 4
        assert False in modes[4]
        assert [m[-1] for m in modes[5:8]] == [True] * 3
    finally:
        await _close(writer)


# ----------------------------------------------------- incomplete reads
@pytest.mark.parametrize("arrival", ["nothing", "buffered", "received", "both"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_incomplete_read_error_carries_the_partial_bytes(socks, impl, arrival):
    """EOF before `n` bytes: IncompleteReadError with the bytes that were
    buffered before the call and received during it, as asyncio's; for
    readexactly and readinto_exactly alike."""
    methods = ["readexactly"] + (["readinto_exactly"] if impl == "aioring" else [])
    for method in methods:
        a, b = _tcp_pair(socks)
        reader, writer = await _streams(impl, a)
        expected_partial = b""
        if arrival in ("buffered", "both"):
            b.sendall(b"xabc")
            assert await reader.read(1) == b"x"  # "abc" stays buffered
            expected_partial += b"abc"
        if method == "readexactly":
            task = asyncio.ensure_future(reader.readexactly(10))
        else:
            task = asyncio.ensure_future(reader.readinto_exactly(bytearray(10)))
        await asyncio.sleep(0)
        if arrival in ("received", "both"):
            b.sendall(b"def")
            expected_partial += b"def"
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await task
        exc = info.value
        ref = asyncio.IncompleteReadError(expected_partial, 10)
        assert (exc.partial, exc.expected, str(exc), exc.args) == (ref.partial, ref.expected, str(ref),
                                                                   ref.args)
        assert reader.at_eof()
        assert await reader.read() == b""
        await _close(writer)


@pytest.mark.parametrize("end", ["frame", "eof"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_a_large_frame_after_its_header_comes_whole(socks, impl, end):
    """A frame's header read alone, then a payload of several TCP segments,
    part of it received with the header and the rest in the socket or still
    coming: the payload whole and in order; at EOF the bytes that came, as
    asyncio's readexactly gives them."""
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    payload = _payload(70_000)
    sent = payload if end == "frame" else payload[:50_000]

    def peer() -> None:
        b.sendall(struct.pack(">Q", len(payload)) + sent)
        b.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=peer)
    thread.start()
    try:
        if impl == "aioring":
            hdr = bytearray(8)
            assert await reader.readinto_exactly(hdr) == 8
            buf = bytearray(struct.unpack(">Q", hdr)[0])
            read = functools.partial(reader.readinto_exactly, buf)
        else:
            read = functools.partial(reader.readexactly, struct.unpack(">Q", await reader.readexactly(8))[0])
        if end == "frame":
            got = await read()
            assert (buf if impl == "aioring" else got) == payload
        else:
            with pytest.raises(asyncio.IncompleteReadError) as info:
                await read()
            assert (info.value.partial, info.value.expected) == (sent, len(payload))
    finally:
        thread.join()
    await _close(writer)


async def test_readinto_at_eof_and_with_empty_buffers(socks):
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    b.sendall(b"abc")
    assert await reader.readinto(bytearray(0)) == 0  # nothing asked, nothing read
    assert await reader.readinto_exactly(bytearray(0)) == 0
    buf = bytearray(2)
    assert await reader.readinto(buf) == 2
    assert buf == b"ab"
    b.shutdown(socket.SHUT_WR)
    assert await reader.readinto(buf) == 1
    assert await reader.readinto(buf) == 0
    assert await reader.readinto(buf) == 0
    assert reader.at_eof()
    with pytest.raises(asyncio.IncompleteReadError) as info:
        await reader.readinto_exactly(buf)
    assert (info.value.partial, info.value.expected) == (b"", 2)
    for bad in (b"read-only", "str", memoryview(b"ro"), None, 5):
        with pytest.raises(TypeError):
            await reader.readinto(bad)
        with pytest.raises(TypeError):
            await reader.readinto_exactly(bad)
    await _close(writer)


async def test_readinto_takes_any_writable_buffer(socks):
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    data = bytes(range(256)) * 64
    b.sendall(data)
    arr = array.array("i", bytes(4096))
    assert await reader.readinto_exactly(arr) == 4096
    assert arr.tobytes() == data[:4096]
    mv = memoryview(bytearray(8192))[100:4196]
    assert await reader.readinto_exactly(mv) == 4096
    assert bytes(mv) == data[4096:8192]
    rest = bytearray(len(data))
    n = 0
    while n < len(data) - 8192:
        n += await reader.readinto(memoryview(rest)[n:])
    assert rest[:n] == data[8192:]
    await _close(writer)


# ---------------------------------------------- readline, readuntil, limits
def _outcome(fn):
    async def run():
        try:
            return ("ok", await fn())
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, ValueError, RuntimeError) as exc:
            fields = (getattr(exc, "consumed", None), getattr(exc, "partial", None),
                      getattr(exc, "expected", None))
            return (type(exc).__name__, str(exc), fields)

    return run()


def _script(rng: random.Random) -> tuple[bytes, list[tuple]]:
    pieces = []
    for _ in range(rng.randrange(5, 40)):
        kind = rng.random()
        if kind < 0.4:
            pieces.append(bytes(rng.choice(b"abxyz") for _ in range(rng.randrange(0, 200))))
        elif kind < 0.8:
            pieces.append(rng.choice([b"\n", b"\r\n", b"ab", b"xyz", b"--"]))
        else:
            pieces.append(b"q" * rng.randrange(0, 300))
    ops: list[tuple] = []
    for _ in range(60):
        r = rng.random()
        if r < 0.3:
            ops.append(("readline",))
        elif r < 0.6:
            ops.append(("readuntil", rng.choice([b"\n", b"\r\n", b"ab", b"xyz", b"--", b"not there"])))
        elif r < 0.75:
            ops.append(("readexactly", rng.choice([0, 1, 5, 50, 400])))
        elif r < 0.9:
            ops.append(("read", rng.choice([0, 1, 10, 1000])))
        elif r < 0.95:
            ops.append(("readuntil", b""))
        else:
            ops.append(("readexactly", -1))
    return b"".join(pieces), ops


def _call(reader, op):
    name, *args = op
    return lambda: getattr(reader, name)(*args)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("impl", IMPLS)
async def test_readline_readuntil_and_limits_behave_as_asyncios_reader(socks, impl, seed):
    """Random data and random reads, against asyncio's StreamReader fed the same
    data: the same results, the same LimitOverrunError, IncompleteReadError and
    ValueError with the same fields, the same bytes left over."""
    rng = random.Random(seed)
    data, ops = _script(rng)
    limit = rng.choice([1, 2, 5, 16, 100, 2**16])
    reference = asyncio.StreamReader(limit=limit)
    reference.feed_data(data)
    reference.feed_eof()
    a, b = _tcp_pair(socks)
    b.sendall(data)  # all of it before the reader starts: one receive takes it
    b.shutdown(socket.SHUT_WR)
    reader, writer = await _streams(impl, a, limit=limit)
    for op in ops:
        expected = await _outcome(_call(reference, op))
        got = await _outcome(_call(reader, op))
        assert got == expected, op
    assert await reader.read() == await reference.read()
    await _close(writer)


@pytest.mark.parametrize("impl", IMPLS)
async def test_concurrent_reads_are_refused_as_asyncio_does(socks, impl):
    a, b = _tcp_pair(socks)
    reader, writer = await _streams(impl, a)
    first = asyncio.ensure_future(reader.read(10))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError) as info:
        await reader.readexactly(3)
    assert str(info.value) == ("readexactly() called while another coroutine is already waiting "
                               "for incoming data")
    with pytest.raises(RuntimeError) as info:
        await reader.read(5)
    assert str(info.value) == "read() called while another coroutine is already waiting for incoming data"
    if impl == "aioring":
        for name in ("readinto", "readinto_exactly"):
            with pytest.raises(RuntimeError) as info:
                await getattr(reader, name)(bytearray(3))
            assert str(info.value) == (f"{name}() called while another coroutine is already waiting "
                                       "for incoming data")
    b.sendall(b"data")
    assert await first == b"data"
    await _close(writer)


@pytest.mark.parametrize("call", ["readexactly", "read", "readinto_exactly"])
async def test_a_wait_whose_receive_cannot_start_raises_and_leaves_no_waiter(socks, monkeypatch, call):
    """The wait step arms the reader's receive after making its waiter: when
    that fails, the read raises the error and the reader has no waiter, so
    the next read goes on (readinto_exactly's wait is the core's own)."""
    from aioring import _channel

    a, b = _tcp_pair(socks)
    reader, writer = await _streams("aioring", a)
    args = {"readexactly": (4,), "read": (4,), "readinto_exactly": (bytearray(4),)}[call]
    real_arm = _channel._Receiver.arm

    def failing_arm(self):
        raise OSError(5, "the receive could not start")

    monkeypatch.setattr(_channel._Receiver, "arm", failing_arm)
    with pytest.raises(OSError) as info:
        await getattr(reader, call)(*args)
    assert info.value.errno == 5
    assert reader._waiter is None
    monkeypatch.setattr(_channel._Receiver, "arm", real_arm)
    b.sendall(b"data")
    got = await getattr(reader, call)(*args)
    assert (args[0] if call == "readinto_exactly" else got) == b"data"
    await _close(writer)


@pytest.mark.parametrize("size", [100, 50_000])
async def test_a_refused_concurrent_read_consumes_nothing(socks, size):
    """A read refused with RuntimeError (another coroutine waits for data)
    must leave the buffered bytes to the reader that waits, as asyncio's
    readexactly does."""
    a, b = _tcp_pair(socks)
    reader, writer = await aioring.open_connection(sock=a)
    data = _payload(300)
    b.sendall(data[:50])
    first = asyncio.ensure_future(reader.readexactly(100))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not first.done()  # 50 bytes buffered, waiting for 50 more
    # (read and readinto would take the buffered bytes, as asyncio's read does; these wait)
    for call in (reader.readexactly(size), reader.readinto_exactly(bytearray(size)), reader.readline(),
                 reader.readuntil(b"no such separator")):
        with pytest.raises(RuntimeError):
            await call
    b.sendall(data[50:])
    assert await first == data[:100]
    assert await reader.readexactly(200) == data[100:]
    await _close(writer)


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_bad_limit_raises_before_connecting(socks, limit):
    listener = socks(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    with pytest.raises(ValueError) as expected:
        await asyncio.open_connection(*listener.getsockname(), limit=limit)
    with pytest.raises(BlockingIOError):
        listener.accept()  # asyncio made no connection
    statistics()
    before = statistics()["submit_calls"]
    fds = _open_fds()
    with pytest.raises(ValueError) as info:
        await aioring.open_connection(*listener.getsockname(), limit=limit)
    assert str(info.value) == str(expected.value)
    assert _open_fds() == fds  # no socket left behind
    assert statistics()["submit_calls"] == before
    with pytest.raises(BlockingIOError):
        listener.accept()


# --------------------------------------------------------- closing, drain
@pytest.mark.parametrize("impl,read", [
    (impl, read) for impl in IMPLS
    for read in ("read", "readexactly", "readline", "readinto", "readinto_exactly")
    if impl == "aioring" or not read.startswith("readinto")])
async def test_closing_the_writer_ends_a_read_in_flight(socks, impl, read, loop_errors):
    statistics()  # the ring and its eventfd exist
    a, b = _tcp_pair(socks)
    fd_a = a.fileno()
    fds = _open_fds()
    reader, writer = await _streams(impl, a)
    if read in ("read", "readline"):
        pending = asyncio.ensure_future(getattr(reader, read)())
    elif read == "readexactly":
        pending = asyncio.ensure_future(reader.readexactly(5))
    else:
        pending = asyncio.ensure_future(getattr(reader, read)(bytearray(5)))
    await asyncio.sleep(0)
    assert not pending.done()
    writer.close()
    assert writer.is_closing()
    await writer.wait_closed()
    if read in ("readexactly", "readinto_exactly"):
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await pending
        assert (info.value.partial, info.value.expected) == (b"", 5)
    else:
        assert await pending in (b"", 0)
    assert a.fileno() == -1  # the stream closed its socket
    if impl == "aioring":  # uvloop's transports hold a dup of the fd for a while
        assert _open_fds() == fds - {fd_a}
    assert b.recv(10) == b""  # the peer sees EOF
    gc_collect()
    assert loop_errors == []


@pytest.mark.parametrize("impl", IMPLS)
async def test_close_lets_the_buffered_writes_go_out(socks, impl):
    a, b = _tcp_pair(socks)
    _, writer = await _streams(impl, a)
    payload = _payload(8 * MiB)
    writer.write(payload)
    writer.write(b"and the tail")
    writer.close()
    got = await asyncio.to_thread(_recv_all_blocking, b)
    await writer.wait_closed()
    assert got == payload + b"and the tail"


@pytest.mark.parametrize("impl", IMPLS)
async def test_drain_follows_the_write_buffer_limits(socks, impl):
    a, b = _tcp_pair(socks)
    _, writer = await _streams(impl, a)
    transport = writer.transport
    reference = None
    if impl == "aioring" and _selector_loop():  # uvloop's transports have limits of their own
        a2, _b2 = _tcp_pair(socks)
        _, reference = await asyncio.open_connection(sock=a2)
        assert transport.get_write_buffer_limits() == reference.transport.get_write_buffer_limits()
        for args in ((10, 20), (-1, None), (None, -5)):
            with pytest.raises(ValueError) as expected:
                reference.transport.set_write_buffer_limits(*args)
            with pytest.raises(ValueError) as info:
                transport.set_write_buffer_limits(*args)
            assert str(info.value) == str(expected.value)
        for args in ((None, None), (1000, None), (None, 1000), (5000, 100)):
            reference.transport.set_write_buffer_limits(*args)
            transport.set_write_buffer_limits(*args)
            assert transport.get_write_buffer_limits() == reference.transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=100_000, low=10_000)
    assert transport.get_write_buffer_limits() == (10_000, 100_000)
    writer.write(b"small")
    await writer.drain()  # under the high water mark: returns at once
    big = _payload(32 * MiB)  # more than the kernel buffers take while nobody reads
    writer.write(big)
    drain = asyncio.ensure_future(writer.drain())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not drain.done()
    assert transport.get_write_buffer_size() > 100_000
    reading = asyncio.ensure_future(asyncio.to_thread(_recv_exactly_blocking, b, 5 + len(big)))
    await drain
    assert transport.get_write_buffer_size() <= 10_000
    got = await reading
    assert got == b"small" + big
    await _close(writer)
    if reference is not None:
        await _close(reference)


def _recv_exactly_blocking(sock: socket.socket, n: int) -> bytes:
    sock.setblocking(True)
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        assert k
        got += k
    return bytes(buf)


async def test_large_mutable_buffers_are_sent_as_they_were_at_write(socks):
    """One bytearray, refilled between writes of 300 KiB to 2 MiB (large
    enough to be copied into memory the stream reuses): the peer receives each
    content as it was when write() was called, as aioring's docstring promises
    (asyncio's 3.12+ transports may keep a view instead)."""
    a, b = _tcp_pair(socks)
    _, writer = await aioring.open_connection(sock=a)
    rng = random.Random(9)
    buf = bytearray(2 * MiB)
    expected = []
    sizes = [rng.choice([300_000, 512 * 1024, MiB, 2 * MiB]) for _ in range(40)]
    total = sum(sizes)
    reading = asyncio.ensure_future(asyncio.to_thread(_recv_exactly_blocking, b, total))
    for i, n in enumerate(sizes):
        buf[:n] = bytes([i]) * n
        writer.write(memoryview(buf)[:n] if n < len(buf) else buf)
        expected.append(bytes([i]) * n)
        buf[:n] = b"\xee" * n  # changed after write(): must not be sent
        if rng.random() < 0.3:
            await writer.drain()
        elif rng.random() < 0.3:
            await asyncio.sleep(0)
    await writer.drain()
    got = await reading
    assert got == b"".join(expected)
    await _close(writer)


@pytest.mark.parametrize("impl", IMPLS)
async def test_writer_methods_match_asyncios(socks, impl):
    a, b = _tcp_pair(socks)
    _, writer = await _streams(impl, a)
    # asyncio's transport refuses these with this message (uvloop's takes None and lists)
    for bad in ("str", 5, None, [b"list"]) if impl == "aioring" or _selector_loop() else ():
        with pytest.raises(TypeError) as info:
            writer.write(bad)
        assert str(info.value) == f"data argument must be a bytes-like object, not {type(bad).__name__!r}"
    buf = bytearray(b"original")
    writer.write(buf)
    buf[:] = b"CHANGED!"  # the write took a copy
    view = memoryview(bytearray(b"view"))
    writer.write(view)
    view[:] = b"VIEW"
    writer.writelines([b"one", bytearray(b"two"), memoryview(b"three")])
    writer.write(b"")
    await writer.drain()
    assert writer.get_extra_info("peername") == b.getsockname()
    assert writer.get_extra_info("sockname") == a.getsockname()
    assert writer.get_extra_info("socket").fileno() == a.fileno()
    assert writer.get_extra_info("no such thing", "default") == "default"
    assert not writer.is_closing()
    await _close(writer)
    assert writer.is_closing()
    assert _recv_all_blocking(b) == b"originalviewonetwothree"


@pytest.mark.parametrize("impl", IMPLS)
async def test_abort_drops_what_is_buffered_and_closes_at_once(socks, impl, loop_errors):
    """abort() with 32 MiB unsent and nobody reading: the stream closes without
    waiting for the peer, which gets a prefix of the data and then the end."""
    statistics()
    a, b = _tcp_pair(socks)
    fd_a = a.fileno()
    fds = _open_fds()
    _, writer = await _streams(impl, a)
    payload = _payload(32 * MiB)
    writer.write(payload)
    for _ in range(5):
        await asyncio.sleep(0)  # a send is in flight, waiting for room
    writer.transport.abort()
    assert writer.is_closing()
    await writer.wait_closed()
    if impl == "aioring":
        assert a.fileno() == -1
        assert _open_fds() == fds - {fd_a}

    def drain_peer() -> bytes:
        b.setblocking(True)
        chunks = []
        try:
            while chunk := b.recv(1 << 16):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
        return b"".join(chunks)

    got = await asyncio.to_thread(drain_peer)
    assert len(got) < len(payload)
    assert got == payload[:len(got)]
    gc_collect()
    assert loop_errors == []


@pytest.mark.parametrize("impl", IMPLS)
async def test_drain_after_close(socks, impl):
    a, _b = _tcp_pair(socks)
    _, writer = await _streams(impl, a)
    writer.close()
    await writer.wait_closed()
    with pytest.raises(ConnectionResetError):
        await writer.drain()
    if impl == "aioring" or _selector_loop():
        writer.write(b"dropped")  # asyncio ignores writes after close (uvloop raises RuntimeError)


# ------------------------------------------------------------------- servers
async def test_server_interface():
    got = []

    async def handler(reader, writer):
        got.append(await reader.read())
        writer.write(b"bye")
        await writer.drain()
        writer.close()

    server = await aioring.start_server(handler, "127.0.0.1", 0)
    assert isinstance(server, aioring.Server)
    assert server.is_serving()
    assert server.get_loop() is asyncio.get_running_loop()
    (sock,) = server.sockets
    address = sock.getsockname()
    assert address[0] == "127.0.0.1"
    reader, writer = await aioring.open_connection(*address)
    writer.write(b"hello")
    writer.write_eof()
    assert await reader.read() == b"bye"
    await _close(writer)
    forever = asyncio.ensure_future(server.serve_forever())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        await server.serve_forever()  # already being served forever
    forever.cancel()
    with pytest.raises(asyncio.CancelledError):
        await forever
    assert not server.is_serving()
    assert server.sockets == ()
    await server.wait_closed()
    assert got == [b"hello"]
    s = socket.socket()
    with s, pytest.raises(ConnectionRefusedError):
        s.connect(address)
    with pytest.raises(RuntimeError):
        await server.serve_forever()  # closed


async def test_server_async_with_and_wait_closed_waits_for_the_connections():
    ended = asyncio.get_running_loop().create_future()

    async def handler(reader, writer):
        while data := await reader.read(100):
            writer.write(data)
        writer.close()
        await writer.wait_closed()
        ended.set_result(None)

    async with await aioring.start_server(handler, "127.0.0.1", 0) as server:
        address = server.sockets[0].getsockname()
        reader, writer = await aioring.open_connection(*address)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        server.close()
        waiting = asyncio.ensure_future(server.wait_closed())
        writer.write(b"still connected")  # a full round trip: many loop iterations
        assert await reader.readexactly(15) == b"still connected"
        assert not waiting.done()
        await _close(writer)
        await ended
        await waiting
    assert server.sockets == ()


@pytest.mark.parametrize("family", ["tcp", "unix"])
@pytest.mark.parametrize("impl", IMPLS)
async def test_wait_closed_returns_after_the_listening_socket_is_closed(impl, family, unix_dir):
    """The last connection ends right after close(): wait_closed must still wait
    for the listener (and remove the unix socket file); asyncio closes them in
    close() itself."""
    loop = asyncio.get_running_loop()
    started, release = loop.create_future(), loop.create_future()

    async def handler(reader, writer):
        started.set_result(None)
        await release
        writer.close()

    mod = aioring if impl == "aioring" else asyncio
    if family == "tcp":
        server = await mod.start_server(handler, "127.0.0.1", 0)
    else:
        server = await mod.start_unix_server(handler, os.path.join(unix_dir, "s"))
    listener = server.sockets[0]
    address = listener.getsockname()
    if family == "tcp":
        _, writer = await mod.open_connection(*address)
    else:
        _, writer = await mod.open_unix_connection(address)
    await started
    server.close()
    release.set_result(None)  # the handler closes its connection in the next iteration
    await server.wait_closed()
    assert listener.fileno() == -1
    removed = family == "unix" and (impl == "aioring" or sys.version_info >= (3, 13))
    if removed:  # aioring removes the socket file at close, as asyncio does from 3.13
        assert not os.path.exists(address)
    s = socket.socket(socket.AF_INET if family == "tcp" else socket.AF_UNIX)
    with s, pytest.raises(FileNotFoundError if removed else ConnectionRefusedError):
        s.connect(address)
    await _close(writer)


@pytest.mark.parametrize("impl", IMPLS)
async def test_close_stops_listening_at_once(impl):
    mod = aioring if impl == "aioring" else asyncio
    server = await mod.start_server(_echo_handler, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()
    server.close()
    s = socket.socket()
    try:
        with pytest.raises(ConnectionRefusedError):
            s.connect(address)
    finally:
        s.close()
        await server.wait_closed()


async def test_server_without_start_serving():
    server = await aioring.start_server(_echo_handler, "127.0.0.1", 0, start_serving=False)
    assert not server.is_serving()
    await server.start_serving()
    assert server.is_serving()
    reader, writer = await aioring.open_connection(*server.sockets[0].getsockname())
    writer.write(b"x")
    writer.write_eof()
    assert await reader.read() == b"x"
    await _close(writer)
    server.close()
    await server.wait_closed()


async def test_server_on_a_given_socket_and_connection_on_a_given_socket(socks):
    listener = socks(socket.socket())
    listener.bind(("127.0.0.1", 0))
    handlers = _Handlers()
    server = await aioring.start_server(handlers, sock=listener)
    address = listener.getsockname()
    client = socket.socket()
    client.connect(address)
    reader, writer = await aioring.open_connection(sock=client)
    writer.write(b"on given sockets")
    writer.write_eof()
    assert await reader.read() == b"on given sockets"
    await _close(writer)
    await handlers.idle(1)
    server.close()
    await server.wait_closed()
    assert listener.fileno() == -1
    with pytest.raises(ValueError):
        await aioring.start_server(_echo_handler, "127.0.0.1", 0, sock=socket.socket())
    with pytest.raises(ValueError):
        await aioring.open_connection("127.0.0.1", 1, sock=socks(socket.socket()))


async def test_open_connection_to_a_closed_port_is_refused_like_asyncio(socks):
    closed = socks(socket.socket())
    closed.bind(("127.0.0.1", 0))  # never listening
    address = closed.getsockname()
    with pytest.raises(ConnectionRefusedError) as expected:
        await asyncio.open_connection(*address)
    with pytest.raises(ConnectionRefusedError) as info:
        await aioring.open_connection(*address)
    assert info.value.errno == expected.value.errno
    if _selector_loop():  # uvloop says "Connection refused"
        assert str(info.value) == str(expected.value)


# -------------------------------------------------------------- unix sockets
@pytest.fixture
def unix_dir():
    with tempfile.TemporaryDirectory(prefix="aior") as path:
        yield path


async def test_unix_server_and_connection(unix_dir):
    path = os.path.join(unix_dir, "sock")
    statistics()
    fds = _open_fds()
    handlers = _Handlers()
    server = await aioring.start_unix_server(handlers, path)
    assert os.path.exists(path)
    assert server.sockets[0].getsockname() == path
    payload = _payload(MiB + 3)
    for _ in range(3):
        reader, writer = await aioring.open_unix_connection(path)
        assert writer.get_extra_info("peername") == path
        sender = asyncio.ensure_future(_send_then_eof(writer, payload))
        assert await reader.readexactly(len(payload)) == payload
        assert await reader.read() == b""
        await sender
        await _close(writer)
    await handlers.idle(3)
    server.close()
    await server.wait_closed()
    assert not os.path.exists(path)  # removed at close
    assert _open_fds() == fds
    with pytest.raises(FileNotFoundError):
        await aioring.open_unix_connection(path)


async def _send_then_eof(writer, payload):
    writer.write(payload)
    await writer.drain()
    writer.write_eof()


async def test_unix_server_async_with_and_a_stale_socket_file(unix_dir):
    path = os.path.join(unix_dir, "stale")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays
    handlers = _Handlers()
    async with await aioring.start_unix_server(handlers, path) as server:
        reader, writer = await aioring.open_unix_connection(path)
        writer.write(b"unix")
        writer.write_eof()
        assert await reader.read() == b"unix"
        await _close(writer)
        assert server.is_serving()
        await handlers.idle(1)
    assert not os.path.exists(path)


async def test_unix_streams_match_asyncio_with_a_given_socket(socks):
    a, b = socket.socketpair()
    socks(a, b)
    reader, writer = await aioring.open_unix_connection(sock=a)
    writer.write(b"over a socketpair")
    assert await asyncio.to_thread(_recv_exactly_blocking, b, 17) == b"over a socketpair"
    b.sendall(b"line one\nline two\n")
    assert await reader.readline() == b"line one\n"
    assert await reader.readuntil(b"two\n") == b"line two\n"
    b.shutdown(socket.SHUT_WR)
    assert await reader.read() == b""
    await _close(writer)
